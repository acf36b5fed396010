"""
np_llama.py — a plain float64 numpy Llama forward, used as a second, independent
oracle next to HF transformers.

make_fixtures.py runs it on every fixture it writes and checks it against the
HF float64 reference; test_golden.py runs it again on the committed files (no
torch needed), so a fixture edited by hand, or a loader-visible format detail
(config keys, tensor names, bf16 layout) that this file and HF read differently,
shows up as a failing test rather than as a mystery in the engine.

Covers exactly what the engine supports (engine/model/model_config.h): llama
(incl. Llama-3 rope scaling, tied embeddings, head_dim != hidden/heads),
mistral (sliding window wider than the prompt), qwen2 (q/k/v bias).
Reads safetensors itself (F32, F16, BF16) so it needs only numpy.
"""
import json
import math
import os
import struct

import numpy as np

_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": "bf16", "F64": np.float64}


def read_safetensors(path):
    """Returns {name: float64 ndarray} for every tensor in one .safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + hlen])
    base = 8 + hlen
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dt = _ST_DTYPES.get(meta["dtype"])
        if dt is None:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {meta['dtype']}")
        start, end = meta["data_offsets"]
        raw = blob[base + start : base + end]
        if dt == "bf16":
            u16 = np.frombuffer(raw, dtype="<u2").astype(np.uint32)
            arr = (u16 << 16).view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=np.dtype(dt).newbyteorder("<"))
        out[name] = arr.astype(np.float64).reshape(meta["shape"])
    return out


def rope_params(cfg):
    """(theta, scaling dict or None) from a config.json dict, accepting both the
    classic keys (rope_theta, rope_scaling) and transformers-5 rope_parameters."""
    rp = cfg.get("rope_parameters") or {}
    theta = cfg.get("rope_theta", rp.get("rope_theta", 10000.0))
    scaling = cfg.get("rope_scaling")
    if not scaling and rp.get("rope_type", "default") != "default":
        scaling = {k: v for k, v in rp.items() if k != "rope_theta"}
    if scaling:
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind == "default":
            scaling = None
    return float(theta), scaling


def inv_freq(cfg, head_dim):
    """float64 rotary inverse frequencies [head_dim/2], as HF computes them
    (modeling_rope_utils: default and llama3)."""
    theta, scaling = rope_params(cfg)
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if scaling is None:
        return inv
    kind = scaling.get("rope_type", scaling.get("type"))
    factor = float(scaling["factor"])
    if kind == "linear":
        return inv / factor
    if kind != "llama3":
        raise ValueError(f"rope scaling {kind!r} not supported")
    lo = float(scaling["low_freq_factor"])
    hi = float(scaling["high_freq_factor"])
    old = float(scaling["original_max_position_embeddings"])
    lo_wavelen, hi_wavelen = old / lo, old / hi
    wavelen = 2 * math.pi / inv
    out = np.where(wavelen > lo_wavelen, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = ~(wavelen < hi_wavelen) & ~(wavelen > lo_wavelen)
    return np.where(medium, smoothed, out)


def dims(cfg):
    d = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or d // nh
    return d, nh, nkv, hd


def _rms(x, w, eps):
    return w * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))


def forward(cfg, W, ids):
    """Logits [len(ids), vocab] in float64 for one sequence starting at position 0.
    cfg: config.json dict. W: {HF tensor name: float64 array}."""
    d, nh, nkv, hd = dims(cfg)
    eps = cfg.get("rms_norm_eps", 1e-6)
    T = len(ids)
    sw = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) else None
    if sw and T > sw:
        raise ValueError("prompt longer than the sliding window: not modelled here")
    ang = np.arange(T, dtype=np.float64)[:, None] * inv_freq(cfg, hd)[None, :]
    ang = np.concatenate([ang, ang], axis=-1)  # [T, hd] rotate-half layout
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(t):  # [T, heads, hd]
        h = hd // 2
        return t * cos + np.concatenate([-t[..., h:], t[..., :h]], axis=-1) * sin

    def lin(x, name):
        y = x @ W[name + ".weight"].T
        b = W.get(name + ".bias")
        return y if b is None else y + b

    x = W["model.embed_tokens.weight"][np.asarray(ids)]  # [T, d]
    mask = np.triu(np.full((T, T), -np.inf), k=1)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = _rms(x, W[p + "input_layernorm.weight"], eps)
        q = rope(lin(h, p + "self_attn.q_proj").reshape(T, nh, hd))
        k = rope(lin(h, p + "self_attn.k_proj").reshape(T, nkv, hd))
        v = lin(h, p + "self_attn.v_proj").reshape(T, nkv, hd)
        k = np.repeat(k, nh // nkv, axis=1)
        v = np.repeat(v, nh // nkv, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / math.sqrt(hd) + mask
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        o = np.einsum("hts,shd->thd", s, v).reshape(T, nh * hd)
        x = x + lin(o, p + "self_attn.o_proj")
        h = _rms(x, W[p + "post_attention_layernorm.weight"], eps)
        g = lin(h, p + "mlp.gate_proj")
        x = x + lin((g / (1 + np.exp(-g))) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    x = _rms(x, W["model.norm.weight"], eps)
    head = W.get("lm_head.weight")
    if head is None:
        head = W["model.embed_tokens.weight"]
    return x @ head.T


def load_dir(path):
    """(config dict, weights) from a fixture directory."""
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    return cfg, read_safetensors(os.path.join(path, "model.safetensors"))


def rel_l2(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))
