"""
test_config_keys.py — no config key that changes a model's math is ignored.

1. Every key of every supported family's transformers config class (the
   installed transformers' to_dict() of LlamaConfig, MistralConfig,
   Qwen2Config, Qwen3Config, Gemma2Config, Gemma3TextConfig, Phi3Config),
   and the classic keys hub configs still carry, is one the HF loader
   (engine/model/weights_hf.c) reads, lists as inert (INERT_KEYS: dropout,
   init, output plumbing, ...) or refuses when set (REFUSED_KEYS). A key
   transformers adds in a later release fails this until it is classified.
   The read keys are the string literals of weights_hf.c's config section.
2. Each refused key, set on a fixture's config.json, is refused with a
   one-line message naming it.
3. Each key the engine reads that changes the math, changed on a fixture of
   a family that uses it, changes the last logits or is refused (an
   accepted-but-ignored key fails).
Needs transformers for part 1 (the client tools' venv, .venv/clients, has
it; skipped without it).
"""
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(HERE, "fixtures")
SRC = os.path.join(ROOT, "engine", "model", "weights_hf.c")
LG_BIN = os.path.abspath(os.environ.get("LG_BIN", os.path.join(ROOT, "build", "loragate")))

CLASSES = ["LlamaConfig", "MistralConfig", "Qwen2Config", "Qwen3Config", "Gemma2Config", "Gemma3TextConfig",
           "Phi3Config"]
# keys of hub configs written by transformers 4.x (classic forms of what 5.x nests)
CLASSIC = ["rope_theta", "rope_scaling", "torch_dtype", "rope_local_base_freq", "sliding_window_pattern",
           "partial_rotary_factor", "hidden_act", "hidden_activation", "cache_implementation"]


def _source():
    with open(SRC) as f:
        return f.read()


def _table(name):
    src = _source()
    m = re.search(r"\b" + name + r"\[\][^=]*=\s*\{(.*?)\};", src, re.S)
    assert m, f"{name} not found in {SRC}"
    return set(re.findall(r'"([^"]+)"', m.group(1)))


def _read_keys():
    src = _source()
    sec = src[src.index("/* ---- config.json"):src.index("/* ---- tokenizer")]
    for t in ("REFUSED_KEYS", "INERT_KEYS"):  # the tables are not reads
        sec = re.sub(r"\b" + t + r"\[\][^=]*=\s*\{.*?\};", "", sec, flags=re.S)
    return set(re.findall(r'"([a-z_][a-z0-9_]*)"', sec))


def _transformers_keys():
    py = os.path.join(ROOT, ".venv", "clients", "bin", "python")
    if not os.access(py, os.X_OK):
        pytest.skip("transformers not installed (.venv/clients: tests/clients/install.sh)")
    code = ("import json, transformers\n"
            f"print(json.dumps({{c: sorted(getattr(transformers, c)().to_dict()) for c in {CLASSES!r}}}))\n")
    p = subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_every_config_key_is_read_inert_or_refused():
    read, inert, refused = _read_keys(), _table("INERT_KEYS"), _table("REFUSED_KEYS")
    assert not (read & refused), f"keys both read and refused: {sorted(read & refused)}"
    missing = {}
    for cls, keys in _transformers_keys().items():
        for k in list(keys) + CLASSIC:
            if k not in read and k not in inert and k not in refused:
                missing.setdefault(k, []).append(cls)
    assert not missing, f"config keys weights_hf.c neither reads, lists as inert nor refuses: {missing}"


def _run(model, ids=(3, 17, 42, 9, 100, 7, 55, 23, 11, 90, 4, 61)):
    if not os.access(LG_BIN, os.X_OK):
        pytest.skip(f"loragate binary not found at {LG_BIN}")
    cmd = [LG_BIN, "generate", "--model", model, "--prompt-tokens", ",".join(map(str, ids)), "--max-tokens", "1",
           "--temperature", "0", "--json", "--logits"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        return None, p.stderr
    return np.asarray(json.loads(p.stdout.strip().splitlines()[-1])["last_logits"]), p.stderr


def _copy(tmp_path, name, edit):
    d = tmp_path / name
    shutil.copytree(os.path.join(FIXTURES, name), d, ignore=shutil.ignore_patterns("lora"))
    cfg = json.load(open(d / "config.json"))
    edit(cfg)
    json.dump(cfg, open(d / "config.json", "w"))
    return str(d)


@pytest.mark.parametrize("key", sorted(_table("REFUSED_KEYS")))
def test_refused_key_is_refused_naming_it(key, tmp_path):
    model = _copy(tmp_path, "llama_gqa_f32", lambda c: c.update({key: 4}))
    logits, err = _run(model)
    assert logits is None, f"{key} = 4 was accepted"
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and key in lines[0], f"stderr: {err!r}"


def _bump(v):
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v + 3 if v < 8 else v // 2
    if isinstance(v, float):
        return v * 1.7 if v > 1e-3 else v * 300
    if isinstance(v, str):
        return {"silu": "gelu_pytorch_tanh", "gelu_pytorch_tanh": "silu"}.get(v, v)
    if isinstance(v, list) and v and isinstance(v[0], str):
        return ["full_attention" if t == "sliding_attention" else "sliding_attention" for t in v]
    if isinstance(v, list):
        return [x * 1.5 for x in v]
    if isinstance(v, dict):
        return {k: _bump(x) if k not in ("rope_type", "type") else x for k, x in v.items()}
    return v


# keys the engine reads that change the math (token ids, dtype names and shapes are checked elsewhere)
MATH = ["rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "sliding_window", "layer_types",
        "max_window_layers", "use_sliding_window", "query_pre_attn_scalar", "attn_logit_softcapping",
        "final_logit_softcapping", "hidden_act", "hidden_activation", "partial_rotary_factor",
        "original_max_position_embeddings", "tie_word_embeddings", "head_dim", "attention_bias",
        "max_position_embeddings"]
WINDOW_KEYS = ("layer_types", "max_window_layers", "use_sliding_window")


def _relevant(cfg, key):
    """Whether transformers' forward depends on key in this config (else changing it changes nothing)."""
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    longrope = isinstance(rs, dict) and rs.get("rope_type", rs.get("type")) == "longrope"
    if key in WINDOW_KEYS:
        if not cfg.get("sliding_window"):
            return False  # no window to place
        if key == "max_window_layers" and cfg.get("layer_types"):
            return False  # layer_types, when saved, is what transformers reads
        return True
    if key == "max_position_embeddings":
        return longrope and "factor" not in rs  # LongRoPE's default factor
    if key == "original_max_position_embeddings":
        return longrope and "original_max_position_embeddings" not in rs
    return True


ARCH_FIXTURES = ["gemma2_f32", "gemma3_f32", "qwen3_gqa_f32", "qwen2_sw8_f32", "phi4mini_longrope_f32",
                 "phi3_partial_sw_f32", "mistral_sw8_f32", "llama3_scaled_f32"]
CASES = []
for _n in ARCH_FIXTURES:
    _p = os.path.join(FIXTURES, _n, "config.json")
    if os.path.exists(_p):
        _c = json.load(open(_p))
        CASES += [(_n, k) for k in MATH if k in _c and _c[k] is not None and _bump(_c[k]) != _c[k] and _relevant(_c, k)]


@pytest.mark.parametrize("name,key", CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_math_key_changes_the_output_or_is_refused(name, key, tmp_path):
    ids = tuple((7 * i + 3) % 200 for i in range(40))  # longer than every window and LongRoPE's 16
    base, err = _run(os.path.join(FIXTURES, name), ids)
    assert base is not None, err
    model = _copy(tmp_path, name, lambda c: c.update({key: _bump(c[key])}))
    got, err = _run(model, ids)
    if got is None:
        assert len([l for l in err.splitlines() if l.strip()]) == 1, err
        return
    assert float(np.max(np.abs(got - base))) > 1e-6, f"{name}: {key} changed and the logits did not"
