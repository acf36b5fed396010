"""
real_smollm2.py — quantized checkpoints of a real model through loragate (figures for docs/benchmarks.md,
"Quantized checkpoints"). NOT run in CI: it needs torch and the quantization packages (the venv of
tests/quant/make_fixtures.py) and takes minutes.

    GPTQMODEL_CPU_WORKERS=2 ../qref/bin/python tests/quant/real_smollm2.py [--lg build/loragate] [--work DIR]
        [--gguf .models/SmolLM2-135M-Instruct.Q4_1.gguf]

1. The 16-bit model: the default model's GGUF (SmolLM2-135M-Instruct Q4_1, deploy/fetch-default-model.sh)
   dequantized by the `gguf` package, q/k rows un-permuted back to HF's layout, saved as an HF bf16
   checkpoint with tests/tokenizer/fixtures/smollm2/tokenizer.json.
2. Quantized from it by the packages: llm-compressor FP8_DYNAMIC (compressed-tensors, W8A8 per-channel,
   dynamic per-token), llm-compressor int4 per channel (RTN, asymmetric), GPTQModel GPTQ (4 bits, g128, sym)
   and AWQ (GEMM, g64: neither llm-compressor nor AWQ take group 128 on K = 576), calibrated on the first --calib-n
   (32) windows of 64 tokens of the calibration text below; plus
   loragate's own `--quantization fp8|int4` on the bf16 checkpoint.
3. Each through `loragate generate` on the CPU backend: perplexity of the fixed evaluation text (the
   next-token log-likelihood at every position, teacher forced: one run per position with --logits), and
   greedy continuations (32 tokens) of 3 prompts, compared with the bf16 model's.
SmolLM2-135M has hidden 576 = 4.5 x 128: every q/k/v/gate/up weight has a partial last group of 128.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GGUF = os.path.join(ROOT, ".models", "SmolLM2-135M-Instruct.Q4_1.gguf")
TOKENIZER = os.path.join(ROOT, "tests", "tokenizer", "fixtures", "smollm2", "tokenizer.json")

CALIB_TEXT = (
    "The history of computing is a history of abstraction. Early machines were programmed by rewiring panels; "
    "later, stored programs let the same hardware run many tasks. Assemblers gave names to instructions, "
    "compilers turned formulas into machine code, and operating systems shared one computer among many users. "
    "Each layer hid the details of the one below it, so that people could think about the problem instead of "
    "the machine. Networks joined computers together, and the web joined documents together. Today a phone in "
    "a pocket holds more memory than the largest computers of the nineteen sixties, and it talks to data "
    "centres that hold millions of processors. Software has grown in the same way: libraries, frameworks and "
    "services are stacked on top of each other, and a single request may pass through dozens of programs "
    "written by different teams in different languages. ") * 4
EVAL_TEXT = (
    "Rivers shape the land they flow through. Over thousands of years, water carves valleys, carries sand and "
    "stones downstream, and builds wide plains where it slows down near the sea. People have always settled "
    "beside rivers, because they offer fresh water, fish, fertile soil and an easy way to travel. Many of the "
    "oldest cities in the world grew up on river banks, and trade along the water connected distant regions "
    "long before roads and railways existed."
)
PROMPTS = ["The capital of France is", "To make a cup of tea, first", "def fibonacci(n):"]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def tokenizer():
    from tokenizers import Tokenizer
    return Tokenizer.from_file(TOKENIZER)


def unpermute(w, n_head):
    """Inverse of llama.cpp convert_hf_to_gguf's LlamaModel.permute."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def make_bf16(out):
    import gguf
    import transformers
    from safetensors.torch import save_file
    r = gguf.GGUFReader(GGUF)
    kv = {f.name: f for f in r.fields.values()}

    def val(k):
        f = kv[k]
        return f.parts[f.data[0]].tolist()[0] if len(f.data) == 1 else None

    nh, nkv = val("llama.attention.head_count"), val("llama.attention.head_count_kv")
    cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=val("llama.embedding_length"),
               intermediate_size=val("llama.feed_forward_length"), num_hidden_layers=val("llama.block_count"),
               num_attention_heads=nh, num_key_value_heads=nkv, vocab_size=49152,
               max_position_embeddings=val("llama.context_length"), rope_theta=float(val("llama.rope.freq_base")),
               rms_norm_eps=float(val("llama.attention.layer_norm_rms_epsilon")), tie_word_embeddings=True,
               bos_token_id=1, eos_token_id=2, torch_dtype="bfloat16")
    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    per = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
           "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
           "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}
    sd = {}
    for t in r.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(x) for x in reversed(t.shape)])  # GGUF lists ne (innermost first)
        if t.name in names:
            name = names[t.name]
        else:
            _, l, kind, _ = t.name.split(".")
            name = f"model.layers.{l}.{per[kind]}.weight"
            if kind == "attn_q":
                w = unpermute(w, nh)
            elif kind == "attn_k":
                w = unpermute(w, nkv)
        sd[name] = torch.from_numpy(np.ascontiguousarray(w)).to(torch.bfloat16)
    if "lm_head.weight" in sd:
        cfg["tie_word_embeddings"] = False
    os.makedirs(out, exist_ok=True)
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(TOKENIZER, os.path.join(out, "tokenizer.json"))
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=TOKENIZER, bos_token="<|im_start|>",
                                               eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.save_pretrained(os.path.join(out, "hf_tok"))


CALIB_N = 32


def calib(n=None, T=64):
    n = n or CALIB_N
    ids = tokenizer().encode(CALIB_TEXT).ids
    return [ids[i * T // 2: i * T // 2 + T] for i in range(n) if len(ids[i * T // 2: i * T // 2 + T]) == T]


def with_tokenizer(src, dst):
    """A copy of src for the quantizers (which want a tokenizer_config.json)."""
    shutil.copytree(src, dst)
    for f in os.listdir(os.path.join(src, "hf_tok")):
        shutil.copy(os.path.join(src, "hf_tok", f), dst)


def llmc(base, out, scheme):
    import transformers
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    m = transformers.AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.bfloat16)
    m.config._name_or_path = base
    if isinstance(scheme, dict):
        recipe = QuantizationModifier(config_groups={"group_0": scheme}, ignore=["lm_head"])
    else:
        recipe = QuantizationModifier(targets="Linear", scheme=scheme, ignore=["lm_head"])
    oneshot(model=m, recipe=recipe)
    m.save_pretrained(out, save_compressed=True)
    shutil.copy(TOKENIZER, os.path.join(out, "tokenizer.json"))


def gptqmodel_q(base, out, **qkw):
    from gptqmodel import GPTQModel, QuantizeConfig
    model = GPTQModel.load(base, QuantizeConfig(**qkw), device="cpu")
    model.quantize([{"input_ids": i, "attention_mask": [1] * len(i)} for i in calib()], batch_size=1)
    model.save(out)
    for f in os.listdir(out):
        if f.startswith("tokenizer") or f == "special_tokens_map.json":
            os.remove(os.path.join(out, f))
    shutil.copy(TOKENIZER, os.path.join(out, "tokenizer.json"))


def lg(binary, model, ids, n, *extra):
    cmd = [binary, "generate", "--model", model, "--prompt-tokens", ",".join(map(str, ids)), "--max-tokens", str(n),
           "--temperature", "0", "--json", "--logits", "--threads", "2", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip()[-500:]}")
    return json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])


def perplexity(binary, model, extra):
    ids = [1] + tokenizer().encode(EVAL_TEXT).ids
    nll = 0.0
    for t in range(1, len(ids)):
        z = np.asarray(lg(binary, model, ids[:t], 1, *extra)["last_logits"], dtype=np.float64)
        z -= z.max()
        nll -= z[ids[t]] - math.log(np.exp(z).sum())
    return math.exp(nll / (len(ids) - 1)), len(ids) - 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lg", default=os.path.join(ROOT, "build", "loragate"))
    ap.add_argument("--work", default="/tmp/lg_real_smollm2")
    ap.add_argument("--only", default="", help="measure only the runs whose name contains this")
    ap.add_argument("--writers", default="ct-fp8-dynamic,ct-w4a16-channel-rtn,gptq-g128,awq-g64",
                    help="the package-written checkpoints to make and measure (AWQ takes ~30 min on 2 cores)")
    ap.add_argument("--gguf", default=GGUF, help="the default model's GGUF (deploy/fetch-default-model.sh)")
    ap.add_argument("--calib-n", type=int, default=32, help="calibration windows of 64 tokens (GPTQ, AWQ)")
    a = ap.parse_args()
    globals()["GGUF"] = a.gguf
    globals()["CALIB_N"] = a.calib_n
    os.makedirs(a.work, exist_ok=True)
    base = os.path.join(a.work, "bf16")
    if not os.path.exists(os.path.join(base, "model.safetensors")):
        make_bf16(base)
    qbase = os.path.join(a.work, "bf16_tok")
    if not os.path.exists(qbase):
        with_tokenizer(base, qbase)
    from gptqmodel.quantization import FORMAT, METHOD
    makers = {
        "ct-fp8-dynamic": lambda o: llmc(qbase, o, "FP8_DYNAMIC"),
        # group 128 does not divide K = 576 for llm-compressor and AWQ: int4 per channel (RTN) and AWQ g64 (which
        # loragate expands to 16 bits at load); GPTQModel's GPTQ takes ceil(576 / 128) groups
        "ct-w4a16-channel-rtn": lambda o: llmc(qbase, o, {"targets": ["Linear"], "weights": {
            "num_bits": 4, "type": "int", "symmetric": False, "strategy": "channel"}}),
        "gptq-g128": lambda o: gptqmodel_q(qbase, o, bits=4, group_size=128, desc_act=False, sym=True),
        "awq-g64": lambda o: gptqmodel_q(qbase, o, bits=4, group_size=64, quant_method=METHOD.AWQ,
                                         format=FORMAT.GEMM),
    }
    runs = [("bf16", base, [])]
    runs += [("--quantization fp8", base, ["--quantization", "fp8"]),
             ("--quantization int4", base, ["--quantization", "int4"])]
    for name, make in makers.items():
        if name not in a.writers.split(","):
            continue
        out = os.path.join(a.work, name)
        if not os.path.exists(os.path.join(out, "model.safetensors")):
            try:
                make(out)
            except Exception as e:  # a writer that cannot handle this model: reported, not fatal
                log(f"{name}: the writer failed: {type(e).__name__}: {str(e)[:300]}")
                continue
        runs.append((name, out, []))
    rows = []
    tk = tokenizer()
    # the bf16 model's continuations: what "same_prefix" counts against (also under --only)
    ref_cont = [lg(a.lg, base, [1] + tk.encode(p).ids, 32)["tokens"] for p in PROMPTS]
    for name, path, extra in runs:
        if a.only and a.only not in name:
            continue
        try:
            ppl, n = perplexity(a.lg, path, extra)
            conts = [lg(a.lg, path, [1] + tk.encode(p).ids, 32, *extra)["tokens"] for p in PROMPTS]
        except RuntimeError as e:
            log(f"{name}: {e}")
            rows.append({"model": name, "error": str(e)[-300:]})
            continue
        same = [next((i for i, (x, y) in enumerate(zip(c, r)) if x != y), min(len(c), len(r)))
                for c, r in zip(conts, ref_cont)]
        rows.append({"model": name, "ppl": round(ppl, 3), "tokens": n, "same_prefix": same,
                     "text": [tk.decode(c) for c in conts]})
        log(json.dumps(rows[-1]))
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
