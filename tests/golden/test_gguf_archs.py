"""
test_gguf_archs.py — the GGUF loader maps every family llama.cpp's GGUF
names (qwen3, gemma2, gemma3, phi3, mistral) to the same model as its HF
directory.

Each arch golden fixture is written as a GGUF the way llama.cpp's
converter writes one: tensor names from the gguf package's TensorNameMap
(llama.cpp's own table), the metadata keys of its GGUFWriter, Gemma's norm
weights stored as 1 + w, Mistral's q/k rows permuted for llama.cpp's
interleaved RoPE (and its architecture written as llama, as the converter
does), Phi-3's LongRoPE factors as rope_factors_short/long tensors, Gemma's
query scale and window period as attention.scale and
attention.sliding_window_pattern (llama.cpp infers them from the model size,
which these tiny models do not follow), and a byte-level vocabulary of the
model's size. loragate then
runs the GGUF and must give the HF fixture's float64 reference logits
(rel-L2 < 1e-4) and greedy path, as the HF directory does.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import np_llama  # noqa: E402
from test_golden import FIXTURES, LG_BIN, ROOT, TIMEOUT, _load_ref, compare_tokens  # noqa: E402

ARCH = {"qwen3": gguf.MODEL_ARCH.QWEN3, "gemma2": gguf.MODEL_ARCH.GEMMA2, "gemma3_text": gguf.MODEL_ARCH.GEMMA3,
        "phi3": gguf.MODEL_ARCH.PHI3, "mistral": gguf.MODEL_ARCH.LLAMA}
NAMES = ["qwen3_gqa_f32", "gemma2_f32", "gemma3_f32", "phi3_partial_sw_f32", "phi4mini_longrope_f32", "mistral_sw8_f32"]


def _bytes_vocab(n):
    # byte-level BPE's printable stand-ins for the 256 bytes (GPT-2's bytes_to_unicode)
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs, k = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + k)
            k += 1
    toks = [chr(c) for _, c in sorted(zip(bs, cs))][: n - 1]
    return toks + ['!"'] + [f"<x{i}>" for i in range(n - len(toks) - 1)]


def _permute(w, n_head):  # llama.cpp's convert_hf_to_gguf LlamaModel.permute
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(name, path):
    cfg, W = np_llama.load_dir(os.path.join(FIXTURES, name))
    mt = cfg["model_type"]
    arch = ARCH[mt]
    aname = gguf.MODEL_ARCH_NAMES[arch]
    d, nh, nkv, hd = np_llama.dims(cfg)
    L = cfg["num_hidden_layers"]
    w = gguf.GGUFWriter(path, aname)
    w.add_block_count(L)
    w.add_embedding_length(d)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    inv, rot, att = np_llama.rope_tables(cfg, hd, "full_attention", 10 ** 9)
    theta, scaling, prf = np_llama._rope_entry(cfg, "full_attention")
    w.add_rope_freq_base(theta)
    w.add_rope_dimension_count(rot)
    if scaling and scaling.get("rope_type", scaling.get("type")) == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(scaling["factor"])
    if cfg.get("sliding_window"):
        w.add_sliding_window(cfg["sliding_window"])
    for k in ("attn_logit_softcapping", "final_logit_softcapping"):
        if cfg.get(k):
            getattr(w, "add_" + k)(cfg[k])
    gemma = mt.startswith("gemma")
    if gemma:  # what llama.cpp infers from the model size, written out (its attention.scale and
        # sliding_window_pattern keys), since these tiny models follow no released size
        w.add_attention_scale(cfg["query_pre_attn_scalar"] ** -0.5)
        lt = cfg["layer_types"]
        period = lt.index("full_attention") + 1
        assert lt == [("full_attention" if (i + 1) % period == 0 else "sliding_attention") for i in range(L)]
        w.add_sliding_window_pattern(period)
    longrope = scaling and scaling.get("rope_type", scaling.get("type")) == "longrope"
    if longrope:
        w.add_rope_scaling_attn_factors(att)
        w.add_rope_scaling_orig_ctx_len(scaling["original_max_position_embeddings"])
        w.add_tensor("rope_factors_short.weight", np.asarray(scaling["short_factor"], dtype=np.float32))
        w.add_tensor("rope_factors_long.weight", np.asarray(scaling["long_factor"], dtype=np.float32))
    V = W["model.embed_tokens.weight"].shape[0]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(_bytes_vocab(V))
    w.add_token_types([1] * V)
    w.add_token_merges(["! \""])  # one merge, as a byte-level BPE vocabulary needs some
    
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    tmap = gguf.TensorNameMap(arch, L)
    for hf, t in sorted(W.items()):
        base = hf[: -len(".weight")] if hf.endswith(".weight") else hf
        g = tmap.get_name(base)
        assert g, f"{name}: no GGUF name for {hf}"
        t = t.astype(np.float32)
        if gemma and hf.endswith("norm.weight"):
            t = t + 1.0  # the converter stores 1 + w
        if mt == "mistral" and ".q_proj." in hf:
            t = _permute(t, nh)
        if mt == "mistral" and ".k_proj." in hf:
            t = _permute(t, nkv)
        w.add_tensor(g + ".weight", np.ascontiguousarray(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("name", [n for n in NAMES if os.path.isdir(os.path.join(FIXTURES, n))])
def test_gguf_matches_hf_reference(name, tmp_path):
    if not os.access(LG_BIN, os.X_OK):
        pytest.skip(f"loragate binary not found at {LG_BIN}")
    path = str(tmp_path / f"{name}.gguf")
    write_gguf(name, path)
    ref = _load_ref(name)
    for pi, prompt in enumerate(ref["prompts"]):
        cmd = [LG_BIN, "generate", "--model", path, "--prompt-tokens", ",".join(map(str, prompt["ids"])),
               "--max-tokens", str(ref["n_greedy"]), "--temperature", "0", "--json", "--logits"]
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
        assert p.returncode == 0, f"{' '.join(cmd)}\n{p.stderr[-3000:]}"
        res = json.loads(p.stdout.strip().splitlines()[-1])
        err = np_llama.rel_l2(res["last_logits"], prompt["last_logits"])
        assert err < 1e-4, f"{name} prompt {pi}: GGUF logits rel L2 {err:.3e}"
        msg = compare_tokens(ref, prompt, list(res["tokens"]))
        assert msg is None, f"{name} prompt {pi}: {msg}"
