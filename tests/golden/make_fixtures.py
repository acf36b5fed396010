#!/usr/bin/env python3
"""
make_fixtures.py — builds the golden fixtures: tiny random Llama-family models
saved by HF transformers, with float64 reference logits and greedy paths.

Usage:  python3 make_fixtures.py [--out DIR] [--only NAME,...] [--device cpu|cuda]
Needs:  torch, transformers, safetensors, numpy. No network. Runs on CPU or GPU
        (auto-detected); the result does not depend on which (weights are drawn
        on the CPU with fixed seeds, references are float64).

For each fixture DIR/<name>/ holds what save_pretrained wrote (config.json,
model.safetensors, generation_config.json) and reference.json:
  prompts[i].ids           prompt token ids (no BOS added)
  prompts[i].last_logits   float64 logits at the last prompt position (9 s.f.)
  prompts[i].greedy        12 greedy tokens (argmax, continuing past EOS)
  prompts[i].margins       per greedy step: top1 - top2 of that step's logits
  prompts[i].top_logits    per greedy step: the top logit
The reference for f16/bf16 models is float64 math on the rounded weights as
saved. HF's modeling code keeps RMSNorm, softmax and rotary cos/sin in float32
even in a float64 model, so those three are patched to float64 here (each
patched op is checked against HF's own output first); a plain numpy float64
forward (np_llama.py) must then agree with HF to ~1e-10, which cross-checks
the reference and the way the saved files are read.

Weights are not HF's init (std 0.02 gives near-uniform attention and logits
with no margins): linear weights ~ N(0, 1/in), embeddings/lm_head
~ N(0, (3/sqrt(hidden))^2), norm weights 1 + N(0, 0.2^2), qkv biases N(0, 0.3^2),
so attention is peaked and logits have std ~2-3.

Configs are saved as the installed transformers writes them; with
transformers >= 5 (rope_parameters, dtype) the classic keys rope_theta,
rope_scaling and torch_dtype are added as well, as on most hub models, except
for the fixture marked raw_config, which keeps the writer's output untouched.
"""
import argparse
import inspect
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import np_llama  # noqa: E402

import transformers  # noqa: E402
from transformers import GenerationConfig  # noqa: E402

N_GREEDY = 12
PROMPT_LENS = (1, 5, 17, 40)

LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}

# name, arch, dtype, dims, extra: every fixture is small (< 700 KB).
FIXTURES = [
    dict(name="llama_mha_f32", arch="llama", dtype="float32", vocab=256, hidden=64, layers=2,
         heads=4, kv=4, head_dim=16, ff=128, tied=False, theta=10000.0),
    dict(name="llama_gqa_f32", arch="llama", dtype="float32", vocab=320, hidden=64, layers=2,
         heads=4, kv=2, head_dim=16, ff=128, tied=False, theta=500000.0),
    dict(name="llama_mqa_f32_tied", arch="llama", dtype="float32", vocab=320, hidden=64, layers=2,
         heads=4, kv=1, head_dim=16, ff=192, tied=True, theta=10000.0),
    dict(name="llama_gqa_f16", arch="llama", dtype="float16", vocab=256, hidden=128, layers=2,
         heads=4, kv=2, head_dim=32, ff=192, tied=False, theta=10000.0),
    dict(name="llama_mha_bf16_tied", arch="llama", dtype="bfloat16", vocab=256, hidden=64, layers=2,
         heads=2, kv=2, head_dim=32, ff=192, tied=True, theta=500000.0),
    dict(name="llama_mqa_bf16_3l", arch="llama", dtype="bfloat16", vocab=320, hidden=64, layers=3,
         heads=4, kv=1, head_dim=16, ff=176, tied=False, theta=10000.0),
    dict(name="llama3_scaled_f32", arch="llama", dtype="float32", vocab=256, hidden=64, layers=2,
         heads=2, kv=1, head_dim=32, ff=128, tied=False, theta=500000.0,
         rope_scaling=LLAMA3_SCALING, max_pos=512),
    dict(name="llama3_scaled_f32_rawcfg", arch="llama", dtype="float32", vocab=256, hidden=64,
         layers=2, heads=4, kv=2, head_dim=16, ff=128, tied=True, theta=500000.0,
         rope_scaling=LLAMA3_SCALING, max_pos=512, raw_config=True),
    dict(name="qwen2_gqa_f32_tied", arch="qwen2", dtype="float32", vocab=256, hidden=64, layers=2,
         heads=4, kv=2, head_dim=16, ff=160, tied=True, theta=1000000.0, eps=1e-6),
    dict(name="mistral_gqa_f32_hd32", arch="mistral", dtype="float32", vocab=256, hidden=64,
         layers=2, heads=4, kv=2, head_dim=32, ff=128, tied=False, theta=1000000.0),
]


def make_config(fx):
    common = dict(
        vocab_size=fx["vocab"], hidden_size=fx["hidden"], intermediate_size=fx["ff"],
        num_hidden_layers=fx["layers"], num_attention_heads=fx["heads"],
        num_key_value_heads=fx["kv"], head_dim=fx["head_dim"],
        max_position_embeddings=fx.get("max_pos", 2048), rms_norm_eps=fx.get("eps", 1e-5),
        tie_word_embeddings=fx["tied"], bos_token_id=1, eos_token_id=2, hidden_act="silu",
    )
    cfg_cls = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config,
               "mistral": transformers.MistralConfig}[fx["arch"]]
    if "rope_parameters" in inspect.signature(cfg_cls.__init__).parameters:  # transformers >= 5
        common["rope_parameters"] = dict(fx.get("rope_scaling") or {"rope_type": "default"},
                                         rope_theta=fx["theta"])
    else:
        common["rope_theta"] = fx["theta"]
        if fx.get("rope_scaling"):
            common["rope_scaling"] = dict(fx["rope_scaling"])
    if fx["arch"] == "llama":
        cfg = transformers.LlamaConfig(attention_bias=False, mlp_bias=False, **common)
        cls = transformers.LlamaForCausalLM
    elif fx["arch"] == "qwen2":
        cfg = transformers.Qwen2Config(use_sliding_window=False, **common)
        cls = transformers.Qwen2ForCausalLM
    elif fx["arch"] == "mistral":
        cfg = transformers.MistralConfig(sliding_window=4096, **common)
        cls = transformers.MistralForCausalLM
    else:
        raise ValueError(fx["arch"])
    return cfg, cls


def reinit(model, fx, seed):
    """Deterministic, less degenerate weights (see the file comment). CPU RNG."""
    g = torch.Generator().manual_seed(seed)
    d = fx["hidden"]
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                new = 1.0 + 0.2 * torch.randn(p.shape, generator=g)
            elif name.endswith(".bias"):
                new = 0.3 * torch.randn(p.shape, generator=g)
            elif "embed_tokens" in name or name.startswith("lm_head"):
                new = (3.0 / math.sqrt(d)) * torch.randn(p.shape, generator=g)
            elif p.dim() == 2:
                new = torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1])
            else:
                raise ValueError(f"no init rule for {name} {tuple(p.shape)}")
            p.copy_(new.to(p.dtype))


def add_classic_keys(path):
    """Adds rope_theta / rope_scaling / torch_dtype next to transformers-5's
    rope_parameters / dtype, if the writer left them out."""
    cp = os.path.join(path, "config.json")
    with open(cp) as f:
        cfg = json.load(f)
    rp = cfg.get("rope_parameters")
    changed = []
    if isinstance(rp, dict):
        if "rope_theta" not in cfg and "rope_theta" in rp:
            cfg["rope_theta"] = rp["rope_theta"]
            changed.append("rope_theta")
        if not cfg.get("rope_scaling") and rp.get("rope_type", "default") != "default":
            cfg["rope_scaling"] = {k: v for k, v in rp.items() if k != "rope_theta"}
            changed.append("rope_scaling")
    if "torch_dtype" not in cfg and "dtype" in cfg:
        cfg["torch_dtype"] = cfg["dtype"]
        changed.append("torch_dtype")
    if changed:
        with open(cp, "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
            f.write("\n")
    return changed


class Float64Patches:
    """Makes HF's float32 islands (RMSNorm, softmax, rotary cos/sin) float64 for
    one loaded model, checking each against HF's own output as it goes."""

    def __init__(self, model, inv64):
        # largest deviation of each patched op from HF's own output (softmax is
        # only re-typed, not re-measured: its entry stays 0)
        self.max_dev = {"rmsnorm": 0.0, "rope": 0.0, "softmax": 0.0}
        self._orig_softmax = torch.nn.functional.softmax
        n_norm = 0
        for m in model.modules():
            if type(m).__name__.endswith("RMSNorm"):
                m.forward = self._norm(m, m.forward)
                n_norm += 1
        if n_norm != 2 * model.config.num_hidden_layers + 1:
            raise RuntimeError(f"found {n_norm} RMSNorm modules")
        rot = getattr(model.model, "rotary_emb", None)
        if rot is None:
            raise RuntimeError("model.model.rotary_emb not found: HF layout changed")
        if abs(float(getattr(rot, "attention_scaling", 1.0)) - 1.0) > 0:
            raise RuntimeError("rotary attention_scaling != 1")
        rot.forward = self._rope(rot.forward, inv64)

    def _norm(self, m, orig):
        eps = getattr(m, "variance_epsilon", getattr(m, "eps", None))

        def f(hs):
            x = hs.to(torch.float64)
            y = m.weight.to(torch.float64) * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
            ref = orig(hs)
            self.max_dev["rmsnorm"] = max(self.max_dev["rmsnorm"], np_llama.rel_l2(y.cpu(), ref.double().cpu()))
            return y.to(hs.dtype)

        return f

    def _rope(self, orig, inv64):
        inv = torch.tensor(inv64, dtype=torch.float64)

        def f(x, position_ids=None, *args, **kwargs):
            cos0, sin0 = orig(x, position_ids, *args, **kwargs)
            ang = position_ids.to(torch.float64)[..., None].cpu() * inv
            emb = torch.cat([ang, ang], dim=-1)
            cos, sin = emb.cos().to(cos0.device), emb.sin().to(sin0.device)
            if cos.shape != cos0.shape:
                raise RuntimeError(f"rotary shape {tuple(cos0.shape)} != {tuple(cos.shape)}")
            dev = max(float((cos - cos0.double()).abs().max()), float((sin - sin0.double()).abs().max()))
            self.max_dev["rope"] = max(self.max_dev["rope"], dev)
            if dev > 1e-4:
                raise RuntimeError(f"rotary cos/sin differ from HF's by {dev}")
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


def r9(x):
    return float(f"{float(x):.9g}")


def top2(logits):
    v, i = torch.topk(logits, 2)
    return int(i[0]), float(v[0]), float(v[0] - v[1])


def greedy_reference(model, ids, n, device):
    """Greedy decoding by full forwards (no KV cache), to be run inside the
    float64 patches: returns the logits at the last prompt position, n greedy
    tokens, each step's top-2 margin and top logit, and whether HF generate
    (its KV-cache path) agrees on the tokens it produced."""
    seq = list(ids)
    greedy, margins, tops, last = [], [], [], None
    for step in range(n):
        lg = model(torch.tensor([seq], device=device)).logits[0, -1].double().cpu()
        if step == 0:
            last = lg
        tok, top, m = top2(lg)
        greedy.append(tok)
        margins.append(m)
        tops.append(top)
        seq.append(tok)
    gen = model.generate(input_ids=torch.tensor([ids], device=device),
                         attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=device),
                         do_sample=False, max_new_tokens=n, pad_token_id=0)
    gen = gen[0, len(ids):].tolist()
    return last, greedy, margins, tops, gen == greedy[: len(gen)]


def build_one(fx, idx, out_dir, device):
    t0 = time.time()
    path = os.path.join(out_dir, fx["name"])
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    seed = 1000 + idx
    torch.manual_seed(seed)
    cfg, cls = make_config(fx)
    model = cls(cfg).to(torch.float32)
    reinit(model, fx, seed)
    model = model.to(getattr(torch, fx["dtype"]))
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2)
    try:
        model.save_pretrained(path, safe_serialization=True)
    except TypeError:  # transformers without the argument: always safetensors
        model.save_pretrained(path)
    if not os.path.exists(os.path.join(path, "generation_config.json")):
        model.generation_config.save_pretrained(path)
    classic = [] if fx.get("raw_config") else add_classic_keys(path)
    names = sorted(os.listdir(path))
    if "model.safetensors" not in names:
        raise RuntimeError(f"{path}: save_pretrained wrote {names}, expected one model.safetensors")
    del model

    # --- reference: reload what was saved, float64 --------------------------
    ld = cls.from_pretrained(path, attn_implementation="eager")
    ld = ld.to(torch.float64).to(device).eval()
    with open(os.path.join(path, "config.json")) as f:
        cfg_json = json.load(f)
    d, nh, nkv, hd = np_llama.dims(cfg_json)
    inv64 = np_llama.inv_freq(cfg_json, hd)
    hf_inv = ld.model.rotary_emb.inv_freq.double().cpu().numpy()
    intended = np_llama.inv_freq({"rope_theta": fx["theta"], "rope_scaling": fx.get("rope_scaling")}, hd)
    for what, ref in (("config.json as parsed by np_llama", inv64), ("the fixture spec", intended)):
        inv_dev = float(np.max(np.abs(hf_inv - ref) / ref))
        if inv_dev > 1e-6:
            raise RuntimeError(f"{fx['name']}: HF inv_freq differs from {what}: {inv_dev}")
    W = np_llama.read_safetensors(os.path.join(path, "model.safetensors"))
    if fx["tied"] != ("lm_head.weight" not in W):
        raise RuntimeError(f"{fx['name']}: tied={fx['tied']} but tensors {sorted(W)[:3]}...")
    sd = {k: v.double().cpu().numpy() for k, v in ld.state_dict().items()}
    for k, v in W.items():
        if not np.array_equal(sd[k], v):
            raise RuntimeError(f"{fx['name']}: {k} reloaded by HF != bytes in model.safetensors")

    g = torch.Generator().manual_seed(seed + 7)
    patches = Float64Patches(ld, inv64)
    prompts = []
    np_err = 0.0
    hf32_err = 0.0
    min_margin = float("inf")
    gen_agree = True
    with torch.inference_mode():
        for L in PROMPT_LENS:
            ids = torch.randint(0, fx["vocab"], (L,), generator=g).tolist()
            # HF as shipped (float32 islands) for the record
            plain = ld(torch.tensor([ids], device=device)).logits[0, -1].double().cpu()
            with patches:
                last, greedy, margins, tops, agree = greedy_reference(ld, ids, N_GREEDY, device)
                gen_agree = gen_agree and agree
            np_logits = np_llama.forward(cfg_json, W, ids)[-1]
            np_err = max(np_err, np_llama.rel_l2(np_logits, last.numpy()))
            hf32_err = max(hf32_err, np_llama.rel_l2(plain.numpy(), last.numpy()))
            min_margin = min(min_margin, min(margins))
            prompts.append(dict(ids=ids, last_logits=[r9(x) for x in last.tolist()], greedy=greedy,
                                margins=[r9(x) for x in margins], top_logits=[r9(x) for x in tops],
                                logit_std=r9(last.std())))
    if np_err > 1e-9:
        raise RuntimeError(f"{fx['name']}: numpy float64 forward differs from HF float64: {np_err:.3g}")

    ref = dict(
        name=fx["name"], arch=fx["arch"], weight_dtype=fx["dtype"], tied=fx["tied"],
        eos_token_ids=[2], bos_token_id=1, n_greedy=N_GREEDY,
        classic_keys_added=classic,
        generator=dict(script="tests/golden/make_fixtures.py", torch=torch.__version__,
                       transformers=transformers.__version__, device=str(device), seed=seed,
                       reference="HF eager forward, float64, RMSNorm/softmax/rope patched to float64"),
        checks=dict(numpy_vs_hf_rel_l2=float(f"{np_err:.3g}"), hf_f32islands_vs_f64_rel_l2=float(f"{hf32_err:.3g}"),
                    generate_agrees=gen_agree, patch_dev={k: float(f"{v:.3g}") for k, v in patches.max_dev.items()}),
        prompts=prompts,
    )
    with open(os.path.join(path, "reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))
    return dict(name=fx["name"], dtype=fx["dtype"], kv=f"{fx['heads']}/{fx['kv']}", size=size,
                np_err=np_err, hf32=hf32_err, min_margin=min_margin, gen=gen_agree,
                std=float(np.mean([p["logit_std"] for p in prompts])), secs=time.time() - t0,
                keys=",".join(classic) or "-")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
    ap.add_argument("--only", default="", help="comma-separated fixture names")
    ap.add_argument("--device", default="auto", help="auto, cpu or cuda")
    a = ap.parse_args()
    device = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if a.device == "auto" else a.device))
    os.makedirs(a.out, exist_ok=True)
    only = set(filter(None, a.only.split(",")))
    print(f"torch {torch.__version__}  transformers {transformers.__version__}  device {device}  out {a.out}")
    rows = []
    failed = []
    for i, fx in enumerate(FIXTURES):
        if only and fx["name"] not in only:
            continue
        try:
            rows.append(build_one(fx, i, a.out, device))
        except Exception as e:  # report every fixture, then fail
            import traceback
            traceback.print_exc()
            failed.append(f"{fx['name']}: {e}")
    hdr = f"{'fixture':28} {'dtype':9} {'H/KV':5} {'KB':>6} {'logit_sd':>8} {'min_margin':>10} " \
          f"{'np_vs_hf':>9} {'hf_f32isl':>9} {'gen':>4} {'added keys':24} {'s':>5}"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print(f"{r['name']:28} {r['dtype']:9} {r['kv']:5} {r['size']/1024:6.0f} {r['std']:8.2f} "
              f"{r['min_margin']:10.2e} {r['np_err']:9.1e} {r['hf32']:9.1e} {'ok' if r['gen'] else 'DIFF':>4} "
              f"{r['keys']:24} {r['secs']:5.1f}")
    total = sum(r["size"] for r in rows)
    print(f"total {total/1024:.0f} KB in {len(rows)} fixtures")
    if failed:
        print("FAILED:\n  " + "\n  ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
