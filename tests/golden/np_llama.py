"""
np_llama.py — a plain float64 numpy Llama forward, used as a second, independent
oracle next to HF transformers.

make_fixtures.py runs it on every fixture it writes and checks it against the
HF float64 reference; test_golden.py runs it again on the committed files (no
torch needed), so a fixture edited by hand, or a loader-visible format detail
(config keys, tensor names, bf16 layout) that this file and HF read differently,
shows up as a failing test rather than as a mystery in the engine.

Covers exactly what the engine supports (engine/model/model_arch.c's families):
llama (incl. Llama-3 rope scaling, tied embeddings, head_dim != hidden/heads),
mistral and phi3 (sliding window over every layer), qwen2 and qwen3 (q/k/v bias;
per-head q/k norms; use_sliding_window over the layers from max_window_layers),
gemma2 and gemma3_text ((1 + w) norms, post-norms, embedding scale, GeGLU with
the tanh GELU, query_pre_attn_scalar, soft-caps, layer_types / pattern windows,
Gemma 3's local RoPE base), phi3 (fused qkv_proj / gate_up_proj, partial rotary,
LongRoPE with its attention factor; long factors when the sequence is longer
than original_max_position_embeddings, as transformers decides per forward).
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


def _rope_entry(cfg, layer_type):
    """(theta, scaling or None, partial_rotary_factor) for one layer type."""
    rp = cfg.get("rope_parameters") or {}
    prf = cfg.get("partial_rotary_factor", rp.get("partial_rotary_factor", 1.0))
    if cfg.get("model_type") == "gemma3_text":
        if "full_attention" in rp or "sliding_attention" in rp:
            e = rp.get(layer_type) or {}
            theta = e.get("rope_theta", 1e6 if layer_type == "full_attention" else 1e4)
            kind = e.get("rope_type", "default")
            return float(theta), (None if kind == "default" else {k: v for k, v in e.items() if k != "rope_theta"}), prf
        if layer_type == "sliding_attention":
            return float(cfg.get("rope_local_base_freq", 1e4)), None, prf
        theta, scaling = rope_params(cfg)
        return float(cfg.get("rope_theta", 1e6)), scaling, prf
    theta, scaling = rope_params(cfg)
    return theta, scaling, prf


def rope_tables(cfg, head_dim, layer_type, seq_len):
    """(inv_freq [rot/2], rot, attention factor) as HF computes them for one layer type."""
    theta, scaling, prf = _rope_entry(cfg, layer_type)
    rot = int(head_dim * prf)
    if scaling is not None and scaling.get("rope_type", scaling.get("type")) in ("longrope", "su"):
        orig = scaling.get("original_max_position_embeddings") or cfg["original_max_position_embeddings"]
        factor = scaling.get("factor") or cfg["max_position_embeddings"] / orig
        att = scaling.get("attention_factor")
        if att is None:
            att = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
        ext = np.asarray(scaling["long_factor"] if seq_len > orig else scaling["short_factor"], dtype=np.float64)
        inv = 1.0 / (ext * theta ** (np.arange(0, rot, 2, dtype=np.float64) / rot))
        return inv, rot, float(att)
    sub = {"rope_theta": theta, "rope_scaling": scaling}
    return inv_freq(sub, rot), rot, 1.0


def layer_windows(cfg):
    """The sliding window of each layer (None: full attention), as transformers picks it."""
    L = cfg["num_hidden_layers"]
    mt = cfg.get("model_type", "llama")
    sw = cfg.get("sliding_window")
    if mt == "llama" or not sw:
        return [None] * L
    if mt in ("mistral", "phi3"):
        return [sw] * L
    if mt in ("qwen2", "qwen3"):
        if not cfg.get("use_sliding_window", False):
            return [None] * L
        lt = cfg.get("layer_types") or ["sliding_attention" if i >= cfg.get("max_window_layers", 28)
                                        else "full_attention" for i in range(L)]
        return [sw if t == "sliding_attention" else None for t in lt]
    pat = cfg.get("sliding_window_pattern", 2 if mt == "gemma2" else 6)
    lt = cfg.get("layer_types") or ["sliding_attention" if (i + 1) % pat else "full_attention" for i in range(L)]
    return [sw if t == "sliding_attention" else None for t in lt]


def dims(cfg):
    d = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or d // nh
    return d, nh, nkv, hd


def _rms(x, w, eps):
    return w * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))


def forward(cfg, W, ids, act_quant=None, kv_cache=None):
    """Logits [len(ids), vocab] in float64 for one sequence starting at position 0.
    cfg: config.json dict. W: {HF tensor name: float64 array}.
    kv_cache: None, or f(layer, k, v) -> (k, v) applied to each layer's K (after RoPE)
    and V [T, n_kv_heads, head_dim] as a KV cache would store them (e.g. rounded to e4m3).
    act_quant(x, name), if given, rounds the input of each linear layer `name`
    (e.g. "model.layers.0.self_attn.q_proj") as a W8A8 matmul does."""
    d, nh, nkv, hd = dims(cfg)
    mt = cfg.get("model_type", "llama")
    gemma = mt in ("gemma2", "gemma3_text")
    eps = cfg.get("rms_norm_eps", 1e-6)
    T = len(ids)
    windows = layer_windows(cfg)
    pos = np.arange(T, dtype=np.float64)

    def rope_fn(layer_type):
        inv, rot, att = rope_tables(cfg, hd, layer_type, T)
        ang = pos[:, None] * inv[None, :]
        ang = np.concatenate([ang, ang], axis=-1)  # [T, rot] rotate-half layout
        cos, sin = (np.cos(ang) * att)[:, None, :], (np.sin(ang) * att)[:, None, :]

        def rope(t):  # [T, heads, hd]
            r, h = t[..., :rot], rot // 2
            r = r * cos + np.concatenate([-r[..., h:], r[..., :h]], axis=-1) * sin
            return np.concatenate([r, t[..., rot:]], axis=-1)

        return rope

    ropes = {lt: rope_fn(lt) for lt in ("full_attention", "sliding_attention")}

    def rms(x, name):
        w = W[name]
        return _rms(x, 1.0 + w if gemma else w, eps)

    def lin(x, name):
        if act_quant is not None and name.startswith("model.layers."):
            x = act_quant(x, name)
        y = x @ W[name + ".weight"].T
        b = W.get(name + ".bias")
        return y if b is None else y + b

    act_name = cfg.get("hidden_activation" if gemma else "hidden_act") or ("gelu_pytorch_tanh" if gemma else "silu")

    def act(g):
        if act_name == "gelu_pytorch_tanh":
            return 0.5 * g * (1 + np.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g ** 3)))
        return g / (1 + np.exp(-g))

    x = W["model.embed_tokens.weight"][np.asarray(ids)]  # [T, d]
    if gemma:  # Gemma 3's scale is a float32 buffer; Gemma 2's a tensor of the activations' dtype
        x = x * (float(np.float32(math.sqrt(d))) if mt == "gemma3_text" else math.sqrt(d))
    scale = cfg.get("query_pre_attn_scalar", 256) ** -0.5 if gemma else 1 / math.sqrt(hd)
    cap = cfg.get("attn_logit_softcapping") if mt == "gemma2" or gemma else None
    qdim, kvdim = nh * hd, nkv * hd
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        w = windows[l]
        allowed = (j <= i) & ((i - j < w) if w else True)
        mask = np.where(allowed, 0.0, -np.inf)
        rope = ropes["sliding_attention" if w and mt == "gemma3_text" else "full_attention"]
        h = rms(x, p + "input_layernorm.weight")
        if p + "self_attn.qkv_proj.weight" in W:
            qkv = lin(h, p + "self_attn.qkv_proj")
            q, k, v = qkv[:, :qdim], qkv[:, qdim:qdim + kvdim], qkv[:, qdim + kvdim:]
        else:
            q, k, v = lin(h, p + "self_attn.q_proj"), lin(h, p + "self_attn.k_proj"), lin(h, p + "self_attn.v_proj")
        q, k, v = q.reshape(T, nh, hd), k.reshape(T, nkv, hd), v.reshape(T, nkv, hd)
        if p + "self_attn.q_norm.weight" in W:
            q = rms(q, p + "self_attn.q_norm.weight")
            k = rms(k, p + "self_attn.k_norm.weight")
        q, k = rope(q), rope(k)
        if kv_cache is not None:
            k, v = kv_cache(l, k, v)
        k = np.repeat(k, nh // nkv, axis=1)
        v = np.repeat(v, nh // nkv, axis=1)
        s = np.einsum("thd,shd->hts", q, k) * scale
        if cap:
            s = cap * np.tanh(s / cap)
        s = s + mask
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        o = np.einsum("hts,shd->thd", s, v).reshape(T, nh * hd)
        o = lin(o, p + "self_attn.o_proj")
        if gemma:
            x = x + rms(o, p + "post_attention_layernorm.weight")
            h = rms(x, p + "pre_feedforward_layernorm.weight")
        else:
            x = x + o
            h = rms(x, p + "post_attention_layernorm.weight")
        if p + "mlp.gate_up_proj.weight" in W:
            gu = lin(h, p + "mlp.gate_up_proj")
            g, u = gu[:, :gu.shape[1] // 2], gu[:, gu.shape[1] // 2:]
        else:
            g, u = lin(h, p + "mlp.gate_proj"), lin(h, p + "mlp.up_proj")
        m = lin(act(g) * u, p + "mlp.down_proj")
        x = x + (rms(m, p + "post_feedforward_layernorm.weight") if gemma else m)
    x = rms(x, "model.norm.weight")
    head = W.get("lm_head.weight")
    if head is None:
        head = W["model.embed_tokens.weight"]
    logits = x @ head.T
    fcap = cfg.get("final_logit_softcapping") if gemma else None
    if fcap:
        logits = fcap * np.tanh(logits / fcap)
    return logits


def load_dir(path):
    """(config dict, weights) from a fixture directory."""
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    return cfg, read_safetensors(os.path.join(path, "model.safetensors"))


def rel_l2(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))
