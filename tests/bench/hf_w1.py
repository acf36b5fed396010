"""
hf_w1.py — the HF reference side of workload W1 (../shared/anchors.md), run on
the GPU test machine next to `loragate bench` in the same call.

W1: Llama-2-7B shape, fp16 random weights, 32 sequences, prompt 128 tokens,
64 new tokens, greedy. Two HF measurements:
  --mode base  transformers generate, no adapter
  --mode peft  HF peft with 32 different rank-16 adapters on q,k,v,o, one per
               sequence in the same batch (generate(..., adapter_names=[...]))
Prints one JSON line: {"mode", "tok_s", "seconds", ...}. Output tokens per
second = num_seqs * new_tokens / wall time of generate (after one warm-up).

  python3 tests/bench/hf_w1.py --mode base
  python3 tests/bench/hf_w1.py --mode peft --adapters 32 --rank 16
"""
import argparse
import json
import time

import torch


def build_model(args):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        hidden_size=args.hidden, intermediate_size=args.ffn, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=args.kv_heads, vocab_size=args.vocab,
        max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.float16)
    model.eval()
    return model


def add_adapters(model, args):
    from peft import LoraConfig, get_peft_model

    lc = LoraConfig(r=args.rank, lora_alpha=2 * args.rank, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                    init_lora_weights=False, task_type="CAUSAL_LM")
    pm = get_peft_model(model, lc, adapter_name="a0")
    for i in range(1, args.adapters):
        pm.add_adapter(f"a{i}", lc)
    pm.to(torch.float16)
    pm.eval()
    return pm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["base", "peft"], default="base")
    ap.add_argument("--num-seqs", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--adapters", type=int, default=32)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--ffn", type=int, default=11008)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=32000)
    args = ap.parse_args()

    model = build_model(args)
    kw = {}
    if args.mode == "peft":
        model = add_adapters(model, args)
        kw["adapter_names"] = [f"a{i % args.adapters}" for i in range(args.num_seqs)]
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.vocab, (args.num_seqs, args.prompt_len), generator=g).cuda()
    mask = torch.ones_like(ids)
    gen = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False, pad_token_id=0,
               eos_token_id=None)
    with torch.inference_mode():
        model.generate(input_ids=ids[:, :8], attention_mask=mask[:, :8], max_new_tokens=4, do_sample=False,
                       pad_token_id=0, **({"adapter_names": kw["adapter_names"]} if kw else {}))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=mask, **gen, **kw)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    new = out.shape[1] - args.prompt_len
    print(json.dumps({"mode": args.mode, "num_seqs": args.num_seqs, "prompt_len": args.prompt_len,
                      "new_tokens": int(new), "adapters": args.adapters if args.mode == "peft" else 0,
                      "rank": args.rank, "seconds": round(dt, 4), "tok_s": round(args.num_seqs * new / dt, 2),
                      "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
