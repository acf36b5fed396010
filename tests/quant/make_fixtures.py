"""
make_fixtures.py — tiny Llama-shaped quantized checkpoints written by the real quantization packages, plus
each package's own dequantization of them, for the loader's tests (tests/unit/engine/model/test_weights_hfquant.c,
tests/quant/test_quant_logits.py).

NOT run in CI (it needs torch): run it by hand in a separate venv, e.g.
    python3 -m venv ../qref
    ../qref/bin/pip install --no-deps torch==2.15.0 compressed-tensors==0.20.1 llmcompressor==0.14.0.1 \
        gptqmodel==7.7.0 autoawq==0.2.9
    ../qref/bin/pip install transformers==5.24.0 accelerate safetensors numpy datasets loguru pypcre ...
    GPTQMODEL_CPU_WORKERS=2 ../qref/bin/python tests/quant/make_fixtures.py
(torch from PyPI is the CUDA build; --no-deps skips its CUDA libraries: everything here runs on the CPU.
GPTQModel writes its logs to ./logs/ of the working directory: run it from a scratch directory or delete them.)
Versions used for the committed fixtures: torch 2.15.0, transformers 5.24.0, compressed-tensors 0.20.1,
llmcompressor 0.14.0.1, gptqmodel 7.7.0, autoawq 0.2.9 (their dequantize_gemm only).

Every fixture: a random Llama (hidden 128, 1 layer, 4 heads / 2 KV heads, head_dim 32, d_ff 256, vocab 64,
untied lm_head; the *_k192 ones hidden 192 and d_ff 128, so K = 192 is not a multiple of 128) quantized by the package:
    tests/fixtures/quant/hf/<case>/config.json, model.safetensors   the checkpoint as the package saved it
    tests/fixtures/quant/hf/<case>/reference.safetensors            "<module>.weight" [out, in] float32: the
        package's dequantization of every quantized Linear (scales taken as float32, so the values are
        scale * code exactly as the package computes them)
    tests/fixtures/quant/hf/<case>/meta.json                        writer, versions, the layout loragate must
        pick, the activation scheme (for the logits test's fake quantization)
The shape is smaller than a real model's (one layer) so that every fixture stays under 1 MB with its float32
reference; d_ff 256 keeps a K of two groups of 128 (down_proj), where group indexing and act-order show.
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(ROOT, "tests", "fixtures", "quant", "hf")
TMP = tempfile.mkdtemp(prefix="lg_qfx_")
VOCAB = 64
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def versions(*pkgs):
    import importlib.metadata as md
    return {p: md.version(p) for p in ("torch", "transformers", "safetensors") + pkgs}


def make_base(path, hidden=128, d_ff=256, dtype=torch.bfloat16, seed=0):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(hidden_size=hidden, intermediate_size=d_ff, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                                   max_position_embeddings=256, tie_word_embeddings=False, bos_token_id=1,
                                   eos_token_id=2, rms_norm_eps=1e-5)
    m = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in n else 0.05 * torch.randn_like(p))
    m = m.to(dtype)
    m.save_pretrained(path)
    save_tokenizer(path)
    m.config._name_or_path = path
    return m


def save_tokenizer(path):
    """A word-level tokenizer over VOCAB ids (the quantizers want one; the fixtures do not keep it)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    v = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i for i in range(3, VOCAB)}}
    tk = Tokenizer(models.WordLevel(v, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    t = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", bos_token="<s>",
                                             eos_token="</s>", pad_token="<unk>")
    t.save_pretrained(path)


def calib_ids(n=16, T=32):
    g = torch.Generator().manual_seed(1)
    return [torch.randint(3, VOCAB, (T,), generator=g).tolist() for _ in range(n)]


def finish(src, case, ref, meta):
    """Copies the checkpoint (config + weights only) and writes the reference and meta."""
    dst = os.path.join(OUT, case)
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    shutil.copy(os.path.join(src, "config.json"), dst)
    shutil.copy(os.path.join(src, "model.safetensors"), dst)
    save_file({k: v.float().contiguous() for k, v in ref.items()}, os.path.join(dst, "reference.safetensors"))
    with open(os.path.join(dst, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
    size = sum(os.path.getsize(os.path.join(dst, n)) for n in os.listdir(dst))
    print(f"{case}: {len(ref)} tensors, {size / 1e6:.2f} MB")


# ---- compressed-tensors (written by llm-compressor) ---------------------------------------------------------


def ct_reference(path):
    """compressed-tensors' own unpacking and dequantize() of every quantized module (scales as float32)."""
    from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import dequantize
    cfg = json.load(open(os.path.join(path, "config.json")))["quantization_config"]
    (group,) = cfg["config_groups"].values()
    args = QuantizationArgs(**group["weights"])
    sd = load_file(os.path.join(path, "model.safetensors"))
    ref = {}
    for k in sd:
        if k.endswith(".weight_scale"):
            mod = k[: -len(".weight_scale")]
            scale = sd[k].float()
            zp = sd.get(mod + ".weight_zero_point")
            if mod + ".weight_packed" in sd:
                shape = torch.Size(sd[mod + ".weight_shape"].tolist())
                q = unpack_from_int32(sd[mod + ".weight_packed"], args.num_bits, shape)
                if zp is not None and zp.dtype == torch.int32:  # packed along the output dim
                    zp = unpack_from_int32(zp, args.num_bits, torch.Size([shape[0], scale.shape[1]]), packed_dim=0)
            else:
                q = sd[mod + ".weight"]
            ref[mod + ".weight"] = dequantize(q.float(), scale, zp, args, dtype=torch.float32)
    return ref


def llmc(case, scheme, hidden=128, static=False):
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    base = os.path.join(TMP, "base_" + case)
    m = make_base(base, hidden=hidden, d_ff=256 if hidden == 128 else 128)
    kw = {}
    if static:
        from datasets import Dataset
        ids = calib_ids()
        kw = dict(dataset=Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(i) for i in ids]}),
                  num_calibration_samples=len(ids), max_seq_length=32)
    if isinstance(scheme, dict):
        recipe = QuantizationModifier(config_groups={"group_0": scheme}, ignore=["lm_head"])
    else:
        recipe = QuantizationModifier(targets="Linear", scheme=scheme, ignore=["lm_head"])
    oneshot(model=m, recipe=recipe, **kw)
    out = os.path.join(TMP, case)
    m.save_pretrained(out, save_compressed=True)
    return out


def ct_cases():
    cases = [
        ("ct_fp8_dynamic", "FP8_DYNAMIC", 128, False, "F8_A8", "token"),
        ("ct_fp8_dynamic_k192", "FP8_DYNAMIC", 192, False, "F8_A8", "token"),  # d_ff 128 (size)
        ("ct_fp8_static", "FP8", 128, True, "F8_A8S", "static"),
        ("ct_fp8_block", "FP8_BLOCK", 128, False, "F8_A8G", "group128"),
        ("ct_fp8_weight_only", {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "symmetric": True,
                                                                   "strategy": "channel"}}, 128, False, "F8", "none"),
        ("ct_w4a16", "W4A16", 128, False, "I4", "none"),
        ("ct_w4a16_asym", "W4A16_ASYM", 128, False, "I4", "none"),
        ("ct_w4a16_channel_k192", {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "symmetric": False,
                                                                      "strategy": "channel"}}, 192, False, "I4", "none"),
    ]
    for case, scheme, hidden, static, layout, act in cases:
        out = llmc(case, scheme, hidden, static)
        finish(out, case, ct_reference(out), {"writer": "llmcompressor oneshot QuantizationModifier",
                                              "scheme": scheme, "layout": layout, "activations": act,
                                              "versions": versions("compressed-tensors", "llmcompressor")})


# ---- quant_method fp8 (written by transformers' FineGrainedFP8 quantize op) -----------------------------------


def hf_fp8_case(case, block):
    """transformers' own Fp8Quantize op (what FineGrainedFP8Config runs at load on a GPU) on each Linear, run
    here on the CPU; the reference is its Fp8Dequantize. MHA (4 KV heads) so that every weight's rows are a
    multiple of 128, which the op needs to quantize a weight."""
    import types
    from transformers import FineGrainedFP8Config
    from transformers.integrations.finegrained_fp8 import Fp8Dequantize, Fp8Quantize
    base = os.path.join(TMP, "base_" + case)
    m = make_base(base)
    del m
    cfg = json.load(open(os.path.join(base, "config.json")))
    cfg["num_key_value_heads"] = 4
    torch.manual_seed(3)
    sd = load_file(os.path.join(base, "model.safetensors"))
    for l in range(cfg["num_hidden_layers"]):
        for p in ("self_attn.k_proj", "self_attn.v_proj"):
            sd[f"model.layers.{l}.{p}.weight"] = (0.05 * torch.randn(128, cfg["hidden_size"])).to(torch.bfloat16)
    qcfg = FineGrainedFP8Config(weight_block_size=[128, 128] if block else None)
    hq = types.SimpleNamespace(quantization_config=qcfg)
    quant, deq = Fp8Quantize(hq), Fp8Dequantize(hq)
    out, ref = {}, {}
    for k, v in sd.items():
        if k.startswith("model.layers.") and k.endswith("_proj.weight"):
            r = quant._quantize_one(k, v)
            out.update(r)
            sk = k[: -len("weight")] + "weight_scale_inv"
            ref[k] = deq._dequantize_one(r[k], r[sk], torch.float32)
        else:
            out[k] = v
    qd = qcfg.to_dict()
    qd["quant_method"] = str(getattr(qd["quant_method"], "value", qd["quant_method"]))
    cfg["quantization_config"] = qd
    d = os.path.join(TMP, case)
    os.makedirs(d)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=1)
    save_file(out, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    finish(d, case, ref, {"writer": "transformers FineGrainedFP8 Fp8Quantize / Fp8Dequantize",
                          "layout": "F8_A8G" if block else "F8_A8", "activations": "group128" if block else "token",
                          "versions": versions()})


def hf_fp8_cases():
    hf_fp8_case("hf_fp8_block", True)
    hf_fp8_case("hf_fp8_tensor", False)


# ---- GPTQ and AWQ (written by GPTQModel) -------------------------------------------------------------------


def gptq_reference(path):
    """GPTQModel's TorchLinear.dequantize_weight() of every module (scales as float32); [out, in]."""
    from gptqmodel import BACKEND, GPTQModel
    # float16: the checkpoint's scales as stored (a bf16 load would round them)
    m = GPTQModel.load(path, backend=BACKEND.TORCH, device="cpu", dtype=torch.float16)
    ref = {}
    for n, mod in m.model.named_modules():
        if hasattr(mod, "dequantize_weight") and hasattr(mod, "qweight"):
            mod.scales = mod.scales.float()
            ref[n + ".weight"] = mod.dequantize_weight().T.contiguous()
    return ref


def awq_reference(path):
    """AutoAWQ's dequantize_gemm (the GEMM format's reference unpacking) of every module; [out, in]."""
    from awq.utils.packing_utils import dequantize_gemm
    cfg = json.load(open(os.path.join(path, "config.json")))["quantization_config"]
    sd = load_file(os.path.join(path, "model.safetensors"))
    ref = {}
    for k in sd:
        if k.endswith(".qweight"):
            mod = k[: -len(".qweight")]
            w = dequantize_gemm(sd[k], sd[mod + ".qzeros"], sd[mod + ".scales"].float(), cfg["bits"],
                                cfg["group_size"])
            ref[mod + ".weight"] = w.T.contiguous()
    return ref


def gptqmodel_case(case, layout, **qkw):
    from gptqmodel import GPTQModel, QuantizeConfig
    base = os.path.join(TMP, "base_" + case)
    make_base(base, dtype=torch.float16)
    model = GPTQModel.load(base, QuantizeConfig(**qkw), device="cpu")
    model.quantize([{"input_ids": i, "attention_mask": [1] * len(i)} for i in calib_ids()], batch_size=1)
    out = os.path.join(TMP, case)
    model.save(out)
    ref = awq_reference(out) if case.startswith("awq") else gptq_reference(out)
    finish(out, case, ref, {"writer": "gptqmodel GPTQModel.quantize", "quantize_config": {k: str(v) for k, v in qkw.items()},
                            "layout": layout, "activations": "none",
                            "versions": versions("gptqmodel", "autoawq")})


def gptq_cases(only=None):
    from gptqmodel.quantization import FORMAT, METHOD
    global gptqmodel_case
    run = gptqmodel_case
    gptqmodel_case = lambda case, *a, **k: (only is None or case in only) and run(case, *a, **k)  # noqa: E731
    gptqmodel_case("gptq_g128", "I4", bits=4, group_size=128, desc_act=False, sym=True)
    gptqmodel_case("gptq_g128_asym", "I4", bits=4, group_size=128, desc_act=False, sym=False)
    gptqmodel_case("gptq_v2_g128", "I4", bits=4, group_size=128, desc_act=False, sym=False, format=FORMAT.GPTQ_V2)
    gptqmodel_case("gptq_per_channel", "I4", bits=4, group_size=-1, desc_act=False, sym=True, act_group_aware=False)
    gptqmodel_case("gptq_act_order", "I4 (down_proj expanded)", bits=4, group_size=128, desc_act=True, sym=True)
    gptqmodel_case("gptq_g32", "dequantized", bits=4, group_size=32, desc_act=False, sym=True)
    gptqmodel_case("awq_g128", "I4", bits=4, group_size=128, quant_method=METHOD.AWQ, format=FORMAT.GEMM)


def refs_again(names):
    """Recomputes reference.safetensors of committed GPTQ fixtures (a copy with a tokenizer, for GPTQModel.load)."""
    for case in names:
        src = os.path.join(OUT, case)
        tmp = os.path.join(TMP, "again_" + case)
        shutil.copytree(src, tmp)
        save_tokenizer(tmp)
        ref = awq_reference(tmp) if case.startswith("awq") else gptq_reference(tmp)
        save_file({k: v.float().contiguous() for k, v in ref.items()}, os.path.join(src, "reference.safetensors"))
        print(f"{case}: reference recomputed")


if __name__ == "__main__":
    if sys.argv[1:2] == ["refs"]:
        refs_again(sys.argv[2:])
        sys.exit(0)
    which = sys.argv[1:] or ["ct", "hf_fp8", "gptq"]  # or case names of gptq_cases
    if "ct" in which:
        ct_cases()
    if "hf_fp8" in which:
        hf_fp8_cases()
    if "gptq" in which:
        gptq_cases()
    rest = [w for w in which if w not in ("ct", "hf_fp8", "gptq")]
    if rest:
        gptq_cases(rest)
    shutil.rmtree(TMP, ignore_errors=True)
