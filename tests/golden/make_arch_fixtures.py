#!/usr/bin/env python3
"""
make_arch_fixtures.py — golden fixtures for the model families beyond Llama
(Qwen3, Gemma 2, Gemma 3 text, Phi-3 / Phi-4-mini, and Mistral / Qwen2 with
their sliding windows shorter than the prompts), each with one PEFT adapter.

Usage:  python3 make_arch_fixtures.py [--out DIR] [--only NAME,...] [--device cpu|cuda]
Needs:  torch, transformers, peft, safetensors, numpy. No network.

Writes DIR/<name>/ exactly as make_fixtures.py does (save_pretrained's files
and reference.json with float64 last logits and greedy paths by transformers'
eager attention), so tests/golden/test_golden.py runs them unchanged, plus
DIR/<name>/lora/ (a peft adapter on every linear module the family has:
Phi-3's fused qkv_proj and gate_up_proj included) and reference.json's
"lora" entry: the same prompts through PeftModel (unmerged) in float64,
checked by tests/golden/test_arch_lora_golden.py in one mixed batch.

The float64 reference patches transformers' float32 islands as
make_fixtures.py does, generalised: every *RMSNorm (Gemma's 1 + w), the
rotary embedding (per layer type for Gemma 3, partial rotary, LongRoPE's
short/long factors and attention factor; each checked against HF's own
cos/sin first) and the softmax. The numpy oracle (np_llama.py) must agree
with it to 1e-9, as for every fixture. Prompts are longer than the sliding
windows (8 keys); the LongRoPE fixture's prompts are all longer than its
original_max_position_embeddings (16), where transformers and loragate both
take the long factors.
"""
import argparse
import copy
import inspect
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_fixtures as mf  # noqa: E402
import np_llama  # noqa: E402

import transformers  # noqa: E402
from transformers import GenerationConfig  # noqa: E402

N_GREEDY = 12
WINDOW = 8
COMMON = dict(vocab=256, hidden=64, layers=4, heads=4, kv=2, head_dim=16, ff=128)

LONG = dict(short_factor=[1.0, 1.1, 1.3, 1.6, 2.0, 2.5], long_factor=[1.0, 1.5, 2.5, 4.0, 6.0, 9.0])

FIXTURES = [
    dict(name="qwen3_gqa_f32", arch="qwen3", dtype="float32", head_dim=32, tied=False, theta=1e6),
    dict(name="qwen3_bf16_tied_sw", arch="qwen3", dtype="bfloat16", tied=True, theta=1e6,
         extra=dict(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=2)),
    dict(name="gemma2_f32", arch="gemma2", dtype="float32", tied=True, theta=1e4,
         extra=dict(sliding_window=WINDOW, query_pre_attn_scalar=24, attn_logit_softcapping=5.0,
                    final_logit_softcapping=3.0, hidden_activation="gelu_pytorch_tanh")),
    # the released Gemma 2 caps (50, 30) here; gemma2_f32 caps hard (5, 3) to test the cap's math at 1e-4
    dict(name="gemma2_bf16", arch="gemma2", dtype="bfloat16", tied=True, theta=1e4,
         extra=dict(sliding_window=WINDOW, query_pre_attn_scalar=16, attn_logit_softcapping=50.0,
                    final_logit_softcapping=30.0, hidden_activation="gelu_pytorch_tanh")),
    dict(name="gemma3_f32", arch="gemma3_text", dtype="float32", tied=True, theta=1e6,
         rope_scaling={"rope_type": "linear", "factor": 2.0}, local_theta=1e4,
         extra=dict(sliding_window=WINDOW, query_pre_attn_scalar=16, hidden_activation="gelu_pytorch_tanh",
                    layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"])),
    dict(name="phi3_partial_sw_f32", arch="phi3", dtype="float32", tied=False, theta=1e4, partial=0.5,
         extra=dict(sliding_window=WINDOW)),
    dict(name="phi4mini_longrope_f32", arch="phi3", dtype="float32", tied=False, theta=1e4, partial=0.75,
         max_pos=128, rope_scaling=dict(LONG, rope_type="longrope", original_max_position_embeddings=16),
         extra=dict(original_max_position_embeddings=16), prompt_lens=(17, 24, 40)),
    dict(name="mistral_sw8_f32", arch="mistral", dtype="float32", tied=False, theta=1e4,
         extra=dict(sliding_window=WINDOW)),
    dict(name="qwen2_sw8_f32", arch="qwen2", dtype="float32", tied=True, theta=1e6,
         extra=dict(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1)),
]

CLASSES = {
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"), "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
    "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM"), "phi3": ("Phi3Config", "Phi3ForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"), "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
}


def make_config(fx):
    f = dict(COMMON, **fx)
    cfg_cls = getattr(transformers, CLASSES[f["arch"]][0])
    cls = getattr(transformers, CLASSES[f["arch"]][1])
    kw = dict(vocab_size=f["vocab"], hidden_size=f["hidden"], intermediate_size=f["ff"],
              num_hidden_layers=f["layers"], num_attention_heads=f["heads"], num_key_value_heads=f["kv"],
              head_dim=f["head_dim"], max_position_embeddings=f.get("max_pos", 2048), rms_norm_eps=1e-5,
              tie_word_embeddings=f["tied"], bos_token_id=1, eos_token_id=2, pad_token_id=0)
    kw.update(f.get("extra", {}))
    rope = dict(f.get("rope_scaling") or {"rope_type": "default"}, rope_theta=f["theta"])
    if "partial" in f:
        rope["partial_rotary_factor"] = f["partial"]
    new_api = "rope_parameters" in inspect.signature(cfg_cls.__init__).parameters or \
        "rope_parameters" in getattr(cfg_cls, "__annotations__", {})
    if f["arch"] == "gemma3_text":
        kw["rope_parameters"] = {"full_attention": rope,
                                 "sliding_attention": {"rope_type": "default", "rope_theta": f["local_theta"]}}
    elif new_api:
        kw["rope_parameters"] = rope
    else:
        kw["rope_theta"] = f["theta"]
        if f.get("rope_scaling"):
            kw["rope_scaling"] = dict(f["rope_scaling"])
        if "partial" in f:
            kw["partial_rotary_factor"] = f["partial"]
    if f["arch"] != "gemma2" and f["arch"] != "gemma3_text":
        kw["hidden_act"] = "silu"
    return cfg_cls(**kw), cls, f


class ArchPatches:
    """make_fixtures.Float64Patches for every family: RMSNorm (Gemma: 1 + w),
    rotary cos/sin (per layer type, partial, LongRoPE) and softmax in float64."""

    def __init__(self, model, cfg_json, hd):
        self.max_dev = {"rmsnorm": 0.0, "rope": 0.0, "softmax": 0.0}
        self._orig_softmax = torch.nn.functional.softmax
        self.cfg, self.hd = cfg_json, hd
        n = 0
        for m in model.modules():
            if type(m).__name__.endswith("RMSNorm"):
                m.forward = self._norm(m, m.forward, "Gemma" in type(m).__name__)
                n += 1
        if n < 2 * model.config.num_hidden_layers + 1:
            raise RuntimeError(f"found {n} RMSNorm modules")
        rot = getattr(model.model, "rotary_emb", None)
        if rot is None:
            raise RuntimeError("model.model.rotary_emb not found: HF layout changed")
        rot.forward = self._rope(rot.forward)

    def _norm(self, m, orig, plus_one):
        eps = getattr(m, "variance_epsilon", getattr(m, "eps", None))

        def f(hs):
            x = hs.to(torch.float64)
            w = m.weight.to(torch.float64)
            y = (1.0 + w if plus_one else w) * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
            ref = orig(hs)
            self.max_dev["rmsnorm"] = max(self.max_dev["rmsnorm"], np_llama.rel_l2(y.cpu(), ref.double().cpu()))
            return y.to(hs.dtype)

        return f

    def _rope(self, orig):
        def f(x, position_ids=None, *args, **kwargs):
            cos0, sin0 = orig(x, position_ids, *args, **kwargs)
            layer_type = args[0] if args else kwargs.get("layer_type")
            seq_len = int(position_ids.max()) + 1
            inv, rot, att = np_llama.rope_tables(self.cfg, self.hd, layer_type or "full_attention", seq_len)
            ang = position_ids.to(torch.float64)[..., None].cpu() * torch.tensor(inv, dtype=torch.float64)
            emb = torch.cat([ang, ang], dim=-1)
            cos, sin = (emb.cos() * att).to(cos0.device), (emb.sin() * att).to(sin0.device)
            if cos.shape != cos0.shape:
                raise RuntimeError(f"rotary shape {tuple(cos0.shape)} != {tuple(cos.shape)}")
            dev = max(float((cos - cos0.double()).abs().max()), float((sin - sin0.double()).abs().max()))
            self.max_dev["rope"] = max(self.max_dev["rope"], dev)
            if dev > 1e-4:
                raise RuntimeError(f"rotary cos/sin ({layer_type}) differ from HF's by {dev}")
            return cos.to(x.dtype), sin.to(x.dtype)

        return f

    def __enter__(self):
        orig = self._orig_softmax

        def softmax(input, dim=None, _stacklevel=3, dtype=None):
            if dtype == torch.float32 and input.dtype == torch.float64:
                dtype = torch.float64
            return orig(input, dim=dim, _stacklevel=_stacklevel, dtype=dtype)

        torch.nn.functional.softmax = softmax
        return self

    def __exit__(self, *exc):
        torch.nn.functional.softmax = self._orig_softmax
        return False


def references(model, inner, cfg_json, W, prompts, device):
    d, nh, nkv, hd = np_llama.dims(cfg_json)
    patches = ArchPatches(inner, cfg_json, hd)
    out, np_err, gen_ok, min_margin = [], 0.0, True, float("inf")
    with torch.inference_mode():
        for ids in prompts:
            with patches:
                last, greedy, margins, tops, agree = mf.greedy_reference(model, ids, N_GREEDY, device)
            gen_ok &= agree
            np_logits = np_llama.forward(cfg_json, W, ids)[-1]
            np_err = max(np_err, np_llama.rel_l2(np_logits, last.numpy()))
            min_margin = min(min_margin, min(margins))
            out.append(dict(ids=ids, last_logits=[mf.r9(x) for x in last.tolist()], greedy=greedy,
                            margins=[mf.r9(x) for x in margins], top_logits=[mf.r9(x) for x in tops],
                            logit_std=mf.r9(last.std())))
    return out, np_err, gen_ok, min_margin, patches


TARGET_CHANGE = 0.25  # relative L2 change of the last logits the adapter causes (as make_lora_fixtures.py)


def make_adapter(base_dir, cls, fx, seed, adir, prompts):
    """A LoRA on every linear module, its B scaled (float64, CPU) so that the last logits move by about
    TARGET_CHANGE: stronger adapters make a 16-bit backend's rounding the whole story."""
    from peft import LoraConfig, get_peft_model
    m32 = cls.from_pretrained(base_dir, attn_implementation="eager").to(torch.float32)
    pm = get_peft_model(m32, LoraConfig(task_type="CAUSAL_LM", r=8, lora_alpha=16, lora_dropout=0.0, bias="none",
                                        init_lora_weights=False, target_modules="all-linear"))
    gen = torch.Generator().manual_seed(seed)
    params = dict(pm.named_parameters())
    init = {n: torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1])
            for n, p in sorted(params.items()) if ".lora_A." in n or ".lora_B." in n}
    base = cls.from_pretrained(base_dir, attn_implementation="eager").to(torch.float64).eval()
    with torch.inference_mode():
        base_last = [base(torch.tensor([ids])).logits[0, -1] for ids in prompts]

    def set_weights(c):
        with torch.no_grad():
            for n, v in init.items():
                params[n].copy_(v * (c if ".lora_B." in n else 1.0))

    c = 0.3
    for _ in range(4):
        set_weights(c)
        pm64 = copy.deepcopy(pm).to(torch.float64)
        with torch.inference_mode():
            ch = np.mean([np_llama.rel_l2(pm64(torch.tensor([ids])).logits[0, -1].numpy(), b.numpy())
                          for ids, b in zip(prompts, base_last)])
        c = float(f"{c * TARGET_CHANGE / max(ch, 1e-6):.2g}")
    set_weights(c)
    pm.save_pretrained(adir)
    for extra in ("README.md",):
        if os.path.exists(os.path.join(adir, extra)):
            os.remove(os.path.join(adir, extra))
    cp = os.path.join(adir, "adapter_config.json")
    acfg = json.load(open(cp))
    acfg["base_model_name_or_path"] = ".."
    with open(cp, "w") as f:
        f.write(json.dumps(acfg, indent=2, sort_keys=True))


def build_one(fx0, idx, out_dir, device):
    from peft import PeftModel
    sys.path.insert(0, HERE)
    import make_lora_fixtures as mlf

    t0 = time.time()
    path = os.path.join(out_dir, fx0["name"])
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    seed = 3000 + idx
    torch.manual_seed(seed)
    cfg, cls, fx = make_config(fx0)
    model = cls(cfg).to(torch.float32)
    mf.reinit(model, fx, seed)
    model = model.to(getattr(torch, fx["dtype"]))
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2)
    model.save_pretrained(path)
    if not os.path.exists(os.path.join(path, "generation_config.json")):
        model.generation_config.save_pretrained(path)
    classic = mf.add_classic_keys(path)
    del model
    cfg_json = json.load(open(os.path.join(path, "config.json")))
    W = np_llama.read_safetensors(os.path.join(path, "model.safetensors"))
    if fx["tied"] != ("lm_head.weight" not in W):
        raise RuntimeError(f"{fx['name']}: tied={fx['tied']} but tensors {sorted(W)[:3]}...")
    g = torch.Generator().manual_seed(seed + 7)
    prompts = [torch.randint(0, fx["vocab"], (L,), generator=g).tolist() for L in fx.get("prompt_lens", (1, 5, 17, 40))]

    ld = cls.from_pretrained(path, attn_implementation="eager").to(torch.float64).to(device).eval()
    sd = {k: v.double().cpu().numpy() for k, v in ld.state_dict().items()}
    for k, v in W.items():
        if not np.array_equal(sd[k], v):
            raise RuntimeError(f"{fx['name']}: {k} reloaded by HF != bytes in model.safetensors")
    refs, np_err, gen_ok, min_margin, patches = references(ld, ld, cfg_json, W, prompts, device)
    if np_err > 1e-9:
        raise RuntimeError(f"{fx['name']}: numpy float64 forward differs from HF float64: {np_err:.3g}")
    del ld

    # the adapter: all linear modules, f32, references through PeftModel (unmerged) in float64
    adir = os.path.join(path, "lora")
    make_adapter(path, cls, fx, seed + 11, adir, prompts)
    hf = cls.from_pretrained(path, attn_implementation="eager")
    pm = PeftModel.from_pretrained(hf, adir).to(torch.float64).to(device).eval()
    mods = mlf.adapter_modules(adir)
    Wm = mlf.np_lora_merge(W, mods)
    lrefs, lnp_err, lgen_ok, lmin_margin, _ = references(pm, pm.get_base_model(), cfg_json, Wm, prompts, device)
    if lnp_err > 1e-9:
        raise RuntimeError(f"{fx['name']}: numpy float64 forward (merged adapter) differs from HF: {lnp_err:.3g}")
    change = float(np.mean([np_llama.rel_l2(a["last_logits"], b["last_logits"]) for a, b in zip(lrefs, refs)]))

    ref = dict(
        name=fx["name"], arch=fx["arch"], weight_dtype=fx["dtype"], tied=fx["tied"],
        eos_token_ids=[2], bos_token_id=1, n_greedy=N_GREEDY, classic_keys_added=classic,
        generator=dict(script="tests/golden/make_arch_fixtures.py", torch=torch.__version__,
                       transformers=transformers.__version__, peft=__import__("peft").__version__,
                       device=str(device), seed=seed,
                       reference="HF eager forward, float64, RMSNorm/softmax/rope patched to float64"),
        checks=dict(numpy_vs_hf_rel_l2=float(f"{np_err:.3g}"), generate_agrees=gen_ok,
                    patch_dev={k: float(f"{v:.3g}") for k, v in patches.max_dev.items()}),
        prompts=refs,
        lora=dict(dir="lora", modules=sorted(mods), numpy_vs_hf_rel_l2=float(f"{lnp_err:.3g}"),
                  generate_agrees=lgen_ok, mean_change=float(f"{change:.3g}"), prompts=lrefs),
    )
    with open(os.path.join(path, "reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(dp, n)) for dp, _, ns in os.walk(path) for n in ns)
    return dict(name=fx["name"], size=size, np_err=max(np_err, lnp_err), gen=gen_ok and lgen_ok,
                min_margin=min(min_margin, lmin_margin), change=change, secs=time.time() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--out", default=os.path.join(HERE, "fixtures"))
    ap.add_argument("--only", default="")
    ap.add_argument("--device", default="auto")
    a = ap.parse_args()
    device = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if a.device == "auto" else a.device))
    only = set(filter(None, a.only.split(",")))
    print(f"torch {torch.__version__}  transformers {transformers.__version__}  device {device}", flush=True)
    rows, failed = [], []
    for i, fx in enumerate(FIXTURES):
        if only and fx["name"] not in only:
            continue
        try:
            rows.append(build_one(fx, i, a.out, device))
            r = rows[-1]
            print(f"{r['name']:24} {r['size']/1024:6.0f} KB  np {r['np_err']:.1e}  gen {r['gen']}  "
                  f"margin {r['min_margin']:.2e}  lora change {r['change']:.3f}  {r['secs']:.1f} s", flush=True)
        except Exception as e:
            import traceback
            traceback.print_exc()
            failed.append(f"{fx['name']}: {e}")
    if failed:
        print("FAILED:\n  " + "\n  ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
