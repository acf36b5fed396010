#!/usr/bin/env python3
"""
make_lora_fixtures.py — golden fixtures for per-request PEFT LoRA adapters:
one tiny random Llama base saved by HF transformers, several LoRA adapters
saved by HF peft, and float64 reference logits / greedy paths for every
(adapter or none, prompt) pair.

Usage:  python3 make_lora_fixtures.py [--out DIR] [--device cpu|cuda|auto]
Needs:  torch, transformers, peft, safetensors, numpy. No network. CPU or GPU;
        weights and adapter scales are drawn / calibrated on the CPU with fixed
        seeds, references are float64, so the files do not depend on the device.

DIR (default tests/golden/lora_fixtures/) holds
  base/            config.json, model.safetensors, generation_config.json
                   (Llama, hidden 128, 4 heads / 2 kv heads, head_dim 32,
                   2 layers, d_ff 256, vocab 320, f32, untied; weights as in
                   make_fixtures.py so logits have std ~3)
  <adapter>/       adapter_config.json, adapter_model.safetensors as peft's
                   save_pretrained writes them (README.md dropped)
  reference.json   adapters{name: spec, checks}, prompts[ids], cases[]:
                   cases[i] = {adapter (null = base), prompt (index), ids,
                   last_logits (float64, 9 s.f.), greedy (12 argmax tokens,
                   continuing past EOS), margins (top1 - top2 per step),
                   top_logits (top1 per step)}
Reference: base loaded with from_pretrained, adapter attached with
PeftModel.from_pretrained, the whole model (LoRA A/B included) cast to float64,
eager attention, with make_fixtures.Float64Patches (RMSNorm, softmax, rotary
cos/sin in float64). Cross-checks, recorded per adapter under "checks":
  merged_vs_unmerged  peft merge_and_unload() in float64 vs the unmerged model
  numpy_vs_hf         np_llama.forward on W + scale * B @ A, with the scales
                      worked out here from adapter_config.json (np_lora_merge)
  generate_agrees     HF generate (KV cache) matches the recomputed greedy path
Adapter B matrices are scaled (factor calibrated on the CPU, 2 s.f.) so each
adapter changes the base logits by ~25 % (relative L2), recorded as rel_change.

The numpy helpers at the top need only numpy (test_lora_golden.py uses them).
"""
import argparse
import copy
import json
import math
import os
import re
import shutil
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import np_llama  # noqa: E402

N_GREEDY = 12
PROMPT_LENS = (3, 11, 29)
BASE_SEED = 4242
TARGET_CHANGE = 0.25  # relative L2 change of the last logits an adapter should cause

BASE = dict(name="base", arch="llama", dtype="float32", vocab=320, hidden=128, layers=2, heads=4, kv=2,
            head_dim=32, ff=256, tied=False, theta=10000.0)

ATTN = ["q_proj", "k_proj", "v_proj", "o_proj"]
MLP = ["gate_proj", "up_proj", "down_proj"]

# name (also the --lora NAME in the test), LoraConfig kwargs, saved dtype
ADAPTERS = [
    dict(name="r1_qv", dtype="float32",
         cfg=dict(r=1, lora_alpha=2, target_modules=["q_proj", "v_proj"])),
    dict(name="r8_rslora_attn", dtype="float32",
         cfg=dict(r=8, lora_alpha=16, use_rslora=True, target_modules=list(ATTN))),
    dict(name="r16_all_linear", dtype="float32",
         cfg=dict(r=16, lora_alpha=24, target_modules="all-linear")),
    dict(name="r64_mlp", dtype="float32",
         cfg=dict(r=64, lora_alpha=32, target_modules=list(MLP))),
    dict(name="r4_patterns", dtype="float32",
         cfg=dict(r=4, lora_alpha=8, target_modules=ATTN + ["down_proj"],
                  rank_pattern={"k_proj": 12, "layers.1.self_attn.q_proj": 6},
                  alpha_pattern={"down_proj": 3, "layers.0.self_attn.v_proj": 20})),
    dict(name="r8_layer1", dtype="float32",
         cfg=dict(r=8, lora_alpha=8, target_modules=["q_proj", "o_proj", "up_proj", "down_proj"],
                  layers_to_transform=[1])),
    dict(name="r8_bf16", dtype="bfloat16",
         cfg=dict(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "o_proj", "gate_proj"])),
]


# --------------------------------------------------------------------------
# numpy side (no torch): read an adapter, work out its scales, merge it


def _pattern_key(keys, module):
    """PEFT get_pattern_key: first key k (in order) with re.match(r'(.*\\.)?(k)$', module)."""
    for k in keys:
        if re.match(rf"(.*\.)?({k})$", module):
            return k
    return None


def adapter_modules(adapter_dir):
    """{module path ('model.layers.0.self_attn.q_proj'): (A [r,in], B [out,r], scale)}
    in float64, scales from adapter_config.json by PEFT's rules (r / lora_alpha,
    rank_pattern / alpha_pattern, use_rslora)."""
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        cfg = json.load(f)
    T = np_llama.read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
    rank_pat = cfg.get("rank_pattern") or {}
    alpha_pat = cfg.get("alpha_pattern") or {}
    out = {}
    for name in sorted(T):
        m = re.fullmatch(r"base_model\.model\.(.+)\.lora_A\.weight", name)
        if not m:
            if not re.fullmatch(r"base_model\.model\.(.+)\.lora_B\.weight", name):
                raise ValueError(f"{adapter_dir}: unexpected tensor {name}")
            continue
        mod = m.group(1)
        A, B = T[name], T[name.replace(".lora_A.", ".lora_B.")]
        k = _pattern_key(rank_pat, mod)
        r = rank_pat[k] if k is not None else cfg["r"]
        k = _pattern_key(alpha_pat, mod)
        alpha = alpha_pat[k] if k is not None else cfg["lora_alpha"]
        if A.shape[0] != r or B.shape[1] != r:
            raise ValueError(f"{adapter_dir}: {mod}: rank {A.shape[0]}/{B.shape[1]} but config says {r}")
        scale = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
        out[mod] = (A, B, float(scale))
    return out


def np_lora_merge(W, modules, only=None):
    """Base weights W with W[m] += scale * B @ A for each adapted module m
    (those in `only`, if given). Returns a new dict (W is not changed)."""
    W2 = dict(W)
    for mod, (A, B, s) in modules.items():
        if only is not None and mod not in only:
            continue
        key = mod + ".weight"
        W2[key] = W[key] + s * (B @ A)
    return W2


# --------------------------------------------------------------------------
# torch side


def r9(x):
    return float(f"{float(x):.9g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--out", default=os.path.join(HERE, "lora_fixtures"))
    ap.add_argument("--device", default="auto", help="auto, cpu or cuda")
    a = ap.parse_args()

    import torch
    import transformers
    import peft
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import GenerationConfig

    import make_fixtures as mf

    device = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if a.device == "auto" else a.device))
    print(f"torch {torch.__version__}  transformers {transformers.__version__}  peft {peft.__version__}  "
          f"device {device}  out {a.out}", flush=True)
    t0 = time.time()
    os.makedirs(a.out, exist_ok=True)
    for n in os.listdir(a.out):  # start clean
        p = os.path.join(a.out, n)
        shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)

    # ---- base ---------------------------------------------------------------
    fx = BASE
    base_dir = os.path.join(a.out, "base")
    torch.manual_seed(BASE_SEED)
    cfg, cls = mf.make_config(fx)
    model = cls(cfg).to(torch.float32)
    mf.reinit(model, fx, BASE_SEED)
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2)
    model.save_pretrained(base_dir)
    if not os.path.exists(os.path.join(base_dir, "generation_config.json")):
        model.generation_config.save_pretrained(base_dir)
    classic = mf.add_classic_keys(base_dir)
    if "model.safetensors" not in os.listdir(base_dir):
        raise RuntimeError(f"save_pretrained wrote {os.listdir(base_dir)}")
    del model
    with open(os.path.join(base_dir, "config.json")) as f:
        cfg_json = json.load(f)
    d, nh, nkv, hd = np_llama.dims(cfg_json)
    inv64 = np_llama.inv_freq(cfg_json, hd)
    W = np_llama.read_safetensors(os.path.join(base_dir, "model.safetensors"))

    g = torch.Generator().manual_seed(BASE_SEED + 7)
    prompts = [torch.randint(0, fx["vocab"], (L,), generator=g).tolist() for L in PROMPT_LENS]

    def load_base(dev, dtype=torch.float64):
        m = cls.from_pretrained(base_dir, attn_implementation="eager")
        return m.to(dtype).to(dev).eval()

    # ---- adapters: create, randomise, calibrate on the CPU, save -------------
    base_cpu64 = None
    specs = {}
    for ai, spec in enumerate(ADAPTERS):
        name = spec["name"]
        adir = os.path.join(a.out, name)
        m32 = load_base("cpu", torch.float32)
        lcfg = LoraConfig(task_type="CAUSAL_LM", lora_dropout=0.0, bias="none", init_lora_weights=False,
                          **spec["cfg"])
        pm = get_peft_model(m32, lcfg)
        gen = torch.Generator().manual_seed(7000 + 31 * ai)
        A0, B0 = {}, {}
        for pname, p in sorted(pm.named_parameters()):
            if ".lora_A." in pname:
                A0[pname] = torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1])
            elif ".lora_B." in pname:
                B0[pname] = torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1])
        if not A0 or len(A0) != len(B0):
            raise RuntimeError(f"{name}: {len(A0)} lora_A, {len(B0)} lora_B parameters")
        params = dict(pm.named_parameters())
        sdt = getattr(torch, spec["dtype"])

        def set_weights(c):
            with torch.no_grad():
                for k, v in A0.items():
                    params[k].copy_(v.to(sdt).to(torch.float32))
                for k, v in B0.items():
                    params[k].copy_((v * c).to(sdt).to(torch.float32))

        # calibrate the B factor so the logits move by ~TARGET_CHANGE (float64, CPU)
        if base_cpu64 is None:
            bm = load_base("cpu")
            with torch.inference_mode():
                base_cpu64 = [bm(torch.tensor([ids])).logits[0, -1].double() for ids in prompts]
            del bm
        c = 0.3
        for _ in range(4):
            set_weights(c)
            pm64 = copy.deepcopy(pm).to(torch.float64)
            with torch.inference_mode():
                ch = np.mean([np_llama.rel_l2(pm64(torch.tensor([ids])).logits[0, -1].double().numpy(),
                                              b.numpy()) for ids, b in zip(prompts, base_cpu64)])
            del pm64
            c = c * TARGET_CHANGE / max(ch, 1e-6)
            c = float(f"{c:.2g}")
        set_weights(c)
        if sdt != torch.float32:
            pm = pm.to(sdt)  # LoRA weights as saved; the base is not saved here
        pm.save_pretrained(adir)
        for extra in ("README.md",):
            p = os.path.join(adir, extra)
            if os.path.exists(p):
                os.remove(p)
        cp = os.path.join(adir, "adapter_config.json")
        with open(cp) as f:
            acfg = json.load(f)
        if acfg.get("base_model_name_or_path"):  # where the base was read from: not portable
            acfg["base_model_name_or_path"] = "../base"
            with open(cp, "w") as f:
                f.write(json.dumps(acfg, indent=2, sort_keys=True))
        specs[name] = dict(spec=spec, b_factor=c)
        del pm, m32
        print(f"  {name}: saved, B factor {c:g}", flush=True)

    # ---- references -----------------------------------------------------------
    def run_case(model, patches, ids):
        with torch.inference_mode(), patches:
            return mf.greedy_reference(model, ids, N_GREEDY, device)

    cases = []
    adapters_out = {}
    base_last = {}
    for name in [None] + [s["name"] for s in ADAPTERS]:
        ts = time.time()
        hf = load_base(device)
        if name is None:
            model, inner = hf, hf
            mods = {}
        else:
            adir = os.path.join(a.out, name)
            model = PeftModel.from_pretrained(hf, adir).to(torch.float64).to(device).eval()
            inner = model.get_base_model()
            bad = [k for k, v in model.named_parameters() if v.dtype != torch.float64]
            if bad:
                raise RuntimeError(f"{name}: not float64 after .to(float64): {bad[:3]}")
            n_lora = sum(1 for k, _ in model.named_parameters() if ".lora_A." in k)
            mods = adapter_modules(adir)
            if n_lora != len(mods):
                raise RuntimeError(f"{name}: peft attached {n_lora} LoRA modules, file has {len(mods)}")
            # peft's scaling per module == the one worked out from the config here
            for mname, mod in inner.named_modules():
                if hasattr(mod, "scaling") and isinstance(getattr(mod, "scaling"), dict) and "default" in mod.scaling:
                    want = mods[mname][2]
                    if abs(mod.scaling["default"] - want) > 1e-12 * max(1, abs(want)):
                        raise RuntimeError(f"{name}: {mname}: peft scaling {mod.scaling['default']} != {want}")
        patches = mf.Float64Patches(inner, inv64)
        Wm = np_lora_merge(W, mods)
        np_err = 0.0
        gen_ok = True
        lasts = []
        for pi, ids in enumerate(prompts):
            last, greedy, margins, tops, gok = run_case(model, patches, ids)
            gen_ok &= gok
            lasts.append(last)
            np_err = max(np_err, np_llama.rel_l2(np_llama.forward(cfg_json, Wm, ids)[-1], last.numpy()))
            cases.append(dict(adapter=name, prompt=pi, ids=ids, last_logits=[r9(x) for x in last.tolist()],
                              greedy=greedy, margins=[r9(x) for x in margins], top_logits=[r9(x) for x in tops],
                              logit_std=r9(last.std())))
        if np_err > 1e-9:
            raise RuntimeError(f"{name}: numpy float64 forward (merged) differs from HF float64: {np_err:.3g}")
        if name is None:
            base_last = lasts
            base_checks = dict(numpy_vs_hf_rel_l2=float(f"{np_err:.3g}"), generate_agrees=gen_ok,
                               patch_dev={k: float(f"{v:.3g}") for k, v in patches.max_dev.items()})
            print(f"  base: numpy {np_err:.1e} gen {gen_ok} ({time.time() - ts:.1f} s)", flush=True)
            continue
        # merged model (peft merge_and_unload, float64) gives the same logits
        merged = PeftModel.from_pretrained(load_base(device), os.path.join(a.out, name))
        merged = merged.to(torch.float64).to(device).merge_and_unload().eval()
        mpatch = mf.Float64Patches(merged, inv64)
        merr = 0.0
        with torch.inference_mode(), mpatch:
            for ids, last in zip(prompts, lasts):
                ml = merged(torch.tensor([ids], device=device)).logits[0, -1].double().cpu()
                merr = max(merr, np_llama.rel_l2(ml.numpy(), last.numpy()))
        if merr > 1e-10:
            raise RuntimeError(f"{name}: merged vs unmerged float64 logits differ: {merr:.3g}")
        change = [np_llama.rel_l2(l.numpy(), b.numpy()) for l, b in zip(lasts, base_last)]
        with open(os.path.join(a.out, name, "adapter_config.json")) as f:
            acfg = json.load(f)
        ranks = sorted({int(v[0].shape[0]) for v in mods.values()})
        adapters_out[name] = dict(
            dir=name, saved_dtype=specs[name]["spec"]["dtype"], lora_config=specs[name]["spec"]["cfg"],
            target_modules_saved=acfg.get("target_modules"), ranks=ranks, max_rank=max(ranks),
            n_modules=len(mods), b_factor=specs[name]["b_factor"],
            scales={k: r9(v[2]) for k, v in sorted(mods.items())},
            rel_change=[r9(x) for x in change],
            checks=dict(merged_vs_unmerged_rel_l2=float(f"{merr:.3g}"), numpy_vs_hf_rel_l2=float(f"{np_err:.3g}"),
                        generate_agrees=gen_ok,
                        patch_dev={k: float(f"{v:.3g}") for k, v in patches.max_dev.items()}))
        print(f"  {name}: {len(mods)} modules ranks {ranks} change {min(change):.2f}..{max(change):.2f} "
              f"merged {merr:.1e} numpy {np_err:.1e} gen {gen_ok} ({time.time() - ts:.1f} s)", flush=True)
        del model, merged, hf

    ref = dict(
        base="base", weight_dtype="float32", eos_token_ids=[2], bos_token_id=1, n_greedy=N_GREEDY,
        classic_keys_added=classic,
        generator=dict(script="tests/golden/make_lora_fixtures.py", torch=torch.__version__,
                       transformers=transformers.__version__, peft=peft.__version__, device=str(device),
                       seed=BASE_SEED,
                       reference="HF eager forward + PeftModel (unmerged), float64, RMSNorm/softmax/rope "
                                 "patched to float64"),
        base_checks=base_checks, adapters=adapters_out, prompts=prompts, cases=cases,
    )
    with open(os.path.join(a.out, "reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")

    total = 0
    for root, _, files in os.walk(a.out):
        for n in files:
            total += os.path.getsize(os.path.join(root, n))
            with open(os.path.join(root, n), "rb") as f:
                blob = f.read()
                if b"/tmp/" in blob or b"/work/" in blob:
                    raise RuntimeError(f"{n}: contains an absolute path")
    mins = min(min(c["margins"]) for c in cases)
    print(f"total {total / 1024:.0f} KB, {len(cases)} cases, min margin {mins:.2e}, {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
