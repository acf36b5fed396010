"""
test_prefix_golden.py — the prefix cache against outside references: logits
computed with a cache hit equal the HF/peft references (and the float64 numpy
oracle that reproduces them, see test_lora_golden.py), `cached_tokens` is
exact, and nothing is ever shared across tenants, adapters, adapter versions
or cache salts.

One run of the binary with `generate --batch FILE --sequential` (each line is
submitted after the previous one finished, so later lines can hit what earlier
ones cached) over the lora fixtures' tiny base model (page = 16 tokens):
  - the fixtures' 29-token prompt, base and with adapters, twice: the second
    run reuses 16 tokens (one full page strictly before the last prompt
    token) and its logits match HF/peft's committed reference;
  - a 70-token prompt and a second one sharing its first 50 tokens, per
    adapter: 0, then 64 (4 pages), then 48 (3 pages) cached tokens, logits vs
    the numpy oracle on W + scale * B @ A;
  - the same 70-token prompt for another tenant, with a cache salt, with
    another adapter: 0 cached tokens each; the same salt again: 64.
Also `--prefix-sharing off` (never a hit) and `global` (a hit across tenants).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIX = os.path.join(HERE, "lora_fixtures")
sys.path.insert(0, HERE)
import np_llama  # noqa: E402
from test_golden import skip_unsplittable  # noqa: E402
from make_lora_fixtures import adapter_modules, np_lora_merge  # noqa: E402

LG_BIN = os.path.abspath(os.environ.get("LG_BIN", os.path.join(ROOT, "build", "loragate")))
LG_BACKEND = os.environ.get("LG_BACKEND", "cpu")
TOL = 1e-4 if os.environ.get("LG_COMPUTE_DTYPE", "float32") == "float32" else 2e-2

with open(os.path.join(FIX, "reference.json")) as f:
    REF = json.load(f)
BASE = os.path.join(FIX, REF["base"])
ADAPTERS = ["r8_rslora_attn", "r16_all_linear"]  # attention-only and all-linear: both change the KV
VOCAB = 320
rng = np.random.default_rng(7)
LONG = [int(x) for x in rng.integers(3, VOCAB, 70)]
SHARED = LONG[:50] + [int(x) for x in rng.integers(3, VOCAB, 20)]
P29 = REF["prompts"][2]


def _case(adapter, prompt_idx):
    for c in REF["cases"]:
        if (c["adapter"] or None) == adapter and int(c["prompt"]) == prompt_idx:
            return c
    raise KeyError((adapter, prompt_idx))


def run_batch(tmp_path, lines, *extra):
    if not os.access(LG_BIN, os.X_OK):
        pytest.skip(f"loragate binary not found at {LG_BIN}")
    path = tmp_path / "batch.jsonl"
    path.write_text("".join(json.dumps(l) + "\n" for l in lines))
    cmd = [LG_BIN, "generate", "--model", BASE, "--backend", LG_BACKEND, "--batch", str(path), "--sequential",
           "--logits", "--max-tokens", "2", "--temperature", "0", *extra]
    for a in ADAPTERS:
        cmd += ["--lora", f"{a}={os.path.join(FIX, REF['adapters'][a]['dir'])}"]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    skip_unsplittable(p)
    assert p.returncode == 0, p.stderr[-3000:]
    out = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    assert len(out) == len(lines), p.stdout[-2000:]
    for o in out:
        assert "error" not in o, o
    return out


_oracle_cache = {}


def oracle(adapter, ids):
    key = (adapter, tuple(ids))
    if key not in _oracle_cache:
        cfg, W = np_llama.load_dir(BASE)
        if adapter:
            W = np_lora_merge(W, adapter_modules(os.path.join(FIX, REF["adapters"][adapter]["dir"])))
        _oracle_cache[key] = np_llama.forward(cfg, W, ids)[-1]
    return _oracle_cache[key]


def rel(a, b):
    return np_llama.rel_l2(np.asarray(a, dtype=np.float64), b)


def line(ids, adapter=None, **kw):
    d = {"prompt_tokens": ids, **kw}
    if adapter:
        d["lora"] = adapter
    return d


def test_cached_prefix_logits_and_exact_cached_tokens(tmp_path):
    lines, want = [], []  # want: (cached_tokens, reference logits, what)
    for a in [None] + ADAPTERS:
        ref29 = _case(a, 2)["last_logits"]
        lines += [line(P29, a), line(P29, a)]
        want += [(0, ref29, f"{a} p29 cold"), (16, ref29, f"{a} p29 warm (HF/peft reference)")]
        lines += [line(LONG, a), line(LONG, a), line(SHARED, a)]
        want += [(0, oracle(a, LONG), f"{a} long cold"), (64, oracle(a, LONG), f"{a} long warm"),
                 (48, oracle(a, SHARED), f"{a} shared 50-token prefix")]
    # isolation: another tenant, a salt, the salt again, the default tenant again
    a = ADAPTERS[0]
    lines += [line(LONG, a, tenant="other"), line(LONG, a, cache_salt="s1"), line(LONG, a, cache_salt="s1"),
              line(LONG, a, cache_salt="s2"), line(LONG, a, tenant="other")]
    want += [(0, oracle(a, LONG), "other tenant"), (0, oracle(a, LONG), "salt s1 cold"),
             (64, oracle(a, LONG), "salt s1 warm"), (0, oracle(a, LONG), "salt s2"),
             (64, oracle(a, LONG), "other tenant warm")]
    out = run_batch(tmp_path, lines)
    bad = []
    for o, (cached, ref, what) in zip(out, want):
        if o["usage"]["cached_tokens"] != cached:
            bad.append(f"{what}: cached_tokens {o['usage']['cached_tokens']} != {cached}")
        e = rel(o["last_logits"], np.asarray(ref, dtype=np.float64))
        if not e < TOL:
            bad.append(f"{what}: logits rel L2 {e:.2e} >= {TOL}")
    assert not bad, "\n".join(bad)
    # cached and uncached runs of the same line agree with each other too (same tokens)
    assert out[0]["tokens"] == out[1]["tokens"]


def test_adapter_namespaces_never_share(tmp_path):
    # the same long prompt under base, then each adapter: each is a different
    # namespace (adapter content digest), so each starts cold
    lines = [line(LONG)] + [line(LONG, a) for a in ADAPTERS] + [line(LONG)]
    out = run_batch(tmp_path, lines)
    assert [o["usage"]["cached_tokens"] for o in out] == [0, 0, 0, 64]


def test_prefix_sharing_off_and_global(tmp_path):
    lines = [line(LONG, tenant="t1"), line(LONG, tenant="t2"), line(LONG, tenant="t2", cache_salt="x")]
    off = run_batch(tmp_path, lines, "--prefix-sharing", "off")
    assert [o["usage"]["cached_tokens"] for o in off] == [0, 0, 0]
    glob = run_batch(tmp_path, lines, "--prefix-sharing", "global")
    assert [o["usage"]["cached_tokens"] for o in glob] == [0, 64, 0]
    ref = oracle(None, LONG)
    for o in off + glob:
        assert rel(o["last_logits"], ref) < TOL
