"""
test_lora_golden.py — per-request PEFT LoRA adapters in loragate against
HF transformers + peft float64 references (fixtures written by
make_lora_fixtures.py; see its header for what each adapter covers).

One run of the binary serves every check: all adapters loaded with --lora and
one mixed --batch holding every (adapter or none, prompt) pair:
    $LG_BIN generate --model lora_fixtures/base --backend $LG_BACKEND
            --lora NAME=DIR ... --batch FILE.jsonl --logits --max-tokens 12 --temperature 0
Per output line (input order) it checks, with test_golden.py's rules:
  - no "error"; last_logits rel L2 error vs the float64 reference < 1e-4;
  - tokens equal the reference greedy path while the reference step is clear
    (top1 - top2 > 1e-3 * max(1, |top1|)); early stop only on an EOS that the
    reference also produced there;
  - each adapter line's logits differ from the base line's for the same prompt
    by at least half the reference's change (a silently ignored adapter fails).
A failing adapter line's message names the module whose LoRA term, re-scaled
(x0 = dropped), best explains the engine's logits (numpy oracle, per module).
Also: --max-lora-rank 32 with the rank-64 adapter must fail with exit code 1
and a one-line error naming the rank; and (no binary needed) the committed
fixture files still reproduce the committed references through the numpy
oracle (np_llama.forward on W + scale * B @ A).
Env: LG_BIN (default <repo>/build/loragate), LG_BACKEND (default cpu),
LG_GOLDEN_TIMEOUT (seconds for the batch run, default 120).
"""
import json
import os
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIX = os.path.join(HERE, "lora_fixtures")
REF_PATH = os.path.join(FIX, "reference.json")
sys.path.insert(0, HERE)
import np_llama  # noqa: E402
from test_golden import skip_unsplittable  # noqa: E402
from make_lora_fixtures import adapter_modules, np_lora_merge  # noqa: E402  (numpy only)

LG_BIN = os.path.abspath(os.environ.get("LG_BIN", os.path.join(ROOT, "build", "loragate")))
LG_BACKEND = os.environ.get("LG_BACKEND", "cpu")
LG_GENERATE_EXTRA = shlex.split(os.environ.get("LG_GENERATE_EXTRA", ""))  # see test_golden.py
LG_COMPUTE_DTYPE = os.environ.get("LG_COMPUTE_DTYPE", "float32")
TIMEOUT = float(os.environ.get("LG_GOLDEN_TIMEOUT", "120"))
LOGIT_TOL = 1e-4 if LG_COMPUTE_DTYPE == "float32" else 2e-2


def _load_ref():
    if not os.path.isfile(REF_PATH):
        return None
    with open(REF_PATH) as f:
        return json.load(f)


REF = _load_ref()
CASES = REF["cases"] if REF else []
ADAPTERS = sorted(REF["adapters"]) if REF else []


def _case_id(c):
    return f"{c['adapter'] or 'base'}-p{c['prompt']}"


def _need_binary():
    if not os.access(LG_BIN, os.X_OK):
        pytest.skip(f"loragate binary not found at {LG_BIN} (build it, or set LG_BIN)")


def _lora_args(names):
    out = []
    for n in names:
        out += ["--lora", f"{n}={os.path.join(FIX, REF['adapters'][n]['dir'])}"]
    return out


@pytest.fixture(scope="module")
def batch_results(tmp_path_factory):
    """Runs the binary once over every case; returns the list of output objects."""
    return _run_batch(tmp_path_factory, [])[0]


# A pool far too small for the whole batch: 1 MiB holds ~16 of this model's
# 64 KiB pages, raised by the engine to one full 64-token context. Adapters must
# be evicted and reloaded, and sequences preempted and recomputed, mid-batch;
# every output must still match the references.
TINY_POOL = ["--pool-mb", "1", "--ctx", "64", "--stats"]


@pytest.fixture(scope="module")
def tiny_pool_results(tmp_path_factory):
    return _run_batch(tmp_path_factory, TINY_POOL)


def _run_batch(tmp_path_factory, extra, env=None):
    _need_binary()
    path = tmp_path_factory.mktemp("lora_batch") / "batch.jsonl"
    with open(path, "w") as f:
        for c in CASES:
            line = {"prompt_tokens": c["ids"]}
            if c["adapter"]:
                line["lora"] = c["adapter"]
            f.write(json.dumps(line) + "\n")
    cmd = [LG_BIN, "generate", "--model", os.path.join(FIX, REF["base"]), "--backend", LG_BACKEND,
           *_lora_args(ADAPTERS), "--batch", str(path), "--logits",
           "--max-tokens", str(REF["n_greedy"]), "--temperature", "0", *LG_GENERATE_EXTRA, *extra]
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT,
                           env=None if env is None else {**os.environ, **env})
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        pytest.fail(f"{' '.join(cmd)}\ntimed out after {TIMEOUT:g} s (LG_GOLDEN_TIMEOUT)\nstderr:\n{err[-2000:]}")
    skip_unsplittable(p)
    assert p.returncode == 0, f"{' '.join(cmd)}\nexit {p.returncode}\nstderr:\n{p.stderr[-4000:]}"
    objs = []
    for line in p.stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            objs.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    assert len(objs) == len(CASES), (f"{len(objs)} JSON objects on stdout for {len(CASES)} batch lines:\n"
                                     f"{p.stdout[-2000:]}\nstderr:\n{p.stderr[-2000:]}")
    return objs, p.stderr


def clear_step(margin, top):
    if LG_COMPUTE_DTYPE != "float32":  # 16-bit compute: test_golden.py's 16-bit rule
        return margin > 0.05
    return margin > 1e-3 * max(1.0, abs(top))


def compare_tokens(case, got, eos):
    """None if got is acceptable, else a message (test_golden.py's rule)."""
    want = case["greedy"]
    for step, (w, m, top) in enumerate(zip(want, case["margins"], case["top_logits"])):
        if not clear_step(m, top):
            return None  # the reference itself is ambiguous here: stop comparing
        if step >= len(got):
            if got and got[-1] in eos and step > 0 and want[step - 1] in eos:
                return None  # stopped on an EOS that the reference also produced there
            return f"only {len(got)} tokens generated, reference has {len(want)}: got {got}, want {want}"
        if got[step] != w:
            return f"step {step}: got {got[step]}, want {w} (ref margin {m:.4g}); got {got}, want {want}"
    return None


_ORACLE = {}


def _oracle():
    if not _ORACLE:
        with open(os.path.join(FIX, REF["base"], "config.json")) as f:
            _ORACLE["cfg"] = json.load(f)
        _ORACLE["W"] = np_llama.read_safetensors(os.path.join(FIX, REF["base"], "model.safetensors"))
    return _ORACLE["cfg"], _ORACLE["W"]


def _diagnose(case, got):
    """Which one adapter module, re-scaled, explains the engine's logits best:
    for each module m, the factor s (m's LoRA term times s, the others as in the
    reference; s = 0 means m dropped) that brings the numpy oracle closest to
    got, and the rel L2 error left. A bug confined to one module shows up as
    that module with a small error left."""
    try:
        cfg, W = _oracle()
        spec = REF["adapters"][case["adapter"]]
        mods = adapter_modules(os.path.join(FIX, spec["dir"]))
        mods = {m: (A, B, float(spec["scales"][m])) for m, (A, B, _) in mods.items()}  # the reference's scales

        def err(m, s):
            mm = dict(mods)
            A, B, sc = mm[m]
            mm[m] = (A, B, sc * s)
            return np_llama.rel_l2(got, np_llama.forward(cfg, np_lora_merge(W, mm), case["ids"])[-1])

        rows = []
        for m in sorted(mods):
            grid = np.linspace(-1.0, 3.0, 17)
            errs = [err(m, s) for s in grid]
            k = int(np.argmin(errs))
            lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
            for _ in range(20):  # ternary search around the best grid point
                a, b = lo + (hi - lo) / 3, hi - (hi - lo) / 3
                if err(m, a) < err(m, b):
                    hi = b
                else:
                    lo = a
            s = (lo + hi) / 2
            rows.append((err(m, s), m, s))
        none = np_llama.rel_l2(got, np_llama.forward(cfg, W, case["ids"])[-1])
        rows.sort()
        return (f"; engine vs oracle without the adapter: {none:.2e}; best single-module explanations "
                f"(module: its LoRA term x factor -> error left): "
                + ", ".join(f"{m} x{s:.3f} -> {e:.2e}" for e, m, s in rows[:3]))
    except Exception as e:  # diagnosis must never hide the failure itself
        return f"; (diagnosis failed: {e})"


def test_fixtures_present():
    assert CASES, f"no fixtures at {REF_PATH}: run tests/golden/make_lora_fixtures.py"
    assert any(c["adapter"] is None for c in CASES) and len(ADAPTERS) >= 5


@pytest.mark.parametrize("ci", range(len(CASES)), ids=[_case_id(c) for c in CASES])
def test_lora_golden(batch_results, ci):
    _check_case(ci, batch_results[ci])


@pytest.mark.parametrize("ci", range(len(CASES)), ids=[_case_id(c) for c in CASES])
def test_lora_golden_tiny_pool(tiny_pool_results, ci):
    _check_case(ci, tiny_pool_results[0][ci])


def test_one_row_steps_fused_norm_equal_separate_ops(tmp_path_factory):
    """Every line alone (--sequential: decode steps of one row) with the backend's
    norm_matmul (CUDA: add_rmsnorm inside the next GEMV, silu inside gate,up, rope
    and the KV write inside q,k,v, the residual moving between two buffers;
    projections an adapter targets keep the separate ops) and with LG_FUSE_NORM=0,
    and with LG_NORM_ROPE=0 (the GEMV, then rope_kv_write): the same tokens and
    logits, bit for bit,
    for the base model and adapters on attention only, MLP only and all modules.
    Backends without the op (CPU) run the separate ops both times."""
    fused = _run_batch(tmp_path_factory, ["--sequential"])[0]
    separate = _run_batch(tmp_path_factory, ["--sequential"], env={"LG_FUSE_NORM": "0"})[0]
    no_rope = _run_batch(tmp_path_factory, ["--sequential"], env={"LG_NORM_ROPE": "0"})[0]
    for other, what in ((separate, "LG_FUSE_NORM=0"), (no_rope, "LG_NORM_ROPE=0")):
        for c, a, b in zip(CASES, fused, other):
            assert "tokens" in a and "last_logits" in a, f"{_case_id(c)}: {sorted(a)}"
            assert a.get("tokens") == b.get("tokens"), f"{_case_id(c)}: tokens differ from {what}"
            assert a.get("last_logits") == b.get("last_logits"), f"{_case_id(c)}: logits differ from {what}"


def test_tiny_pool_evicts_and_reloads(tiny_pool_results):
    """The tiny-pool run really exercised the unified pool: idle adapters were
    evicted by pressure (the counters --stats prints). Reloading an evicted
    adapter is covered by tests/unit/adapters/test_adapter_cache.c."""
    stderr = tiny_pool_results[1]
    m = re.search(r"adapter loads (\d+), evictions (\d+)", stderr)
    assert m, f"no pool counters in stderr:\n{stderr[-2000:]}"
    loads, evictions = int(m.group(1)), int(m.group(2))
    assert evictions > 0 and loads >= len(ADAPTERS), f"loads {loads}, evictions {evictions}: no pool pressure"


def _check_case(ci, res):
    case = CASES[ci]
    what = f"{_case_id(case)} (prompt len {len(case['ids'])})"
    assert "error" not in res, f"{what}: engine reported error: {res['error']}"
    for key in ("tokens", "last_logits"):
        assert key in res, f"{what}: output has no {key!r}: keys {sorted(res)}"
    got = np.asarray(res["last_logits"], dtype=np.float64)
    want = np.asarray(case["last_logits"], dtype=np.float64)
    assert got.shape == want.shape, f"{what}: last_logits has {got.shape[0]} values, vocab is {want.shape[0]}"
    assert np.all(np.isfinite(got)), f"{what}: non-finite logits"
    err = np_llama.rel_l2(got, want)
    if err >= LOGIT_TOL:
        diag = _diagnose(case, got) if case["adapter"] else ""
        pytest.fail(f"{what}: last_logits rel L2 err {err:.3e} >= {LOGIT_TOL:g}; argmax got {int(got.argmax())} "
                    f"want {int(want.argmax())}{diag}")
    msg = compare_tokens(case, list(res["tokens"]), set(REF.get("eos_token_ids") or []))
    assert msg is None, f"{what}: {msg}"


ADAPTER_CASES = [i for i, c in enumerate(CASES) if c["adapter"]]


@pytest.mark.parametrize("ci", ADAPTER_CASES, ids=[_case_id(CASES[i]) for i in ADAPTER_CASES])
def test_adapter_changes_logits(batch_results, ci):
    """The adapter line differs from the base line (same prompt, same run) about
    as much as in the reference: catches an adapter that is silently ignored."""
    case = CASES[ci]
    bi = next(i for i, c in enumerate(CASES) if c["adapter"] is None and c["prompt"] == case["prompt"])
    a, b = batch_results[ci], batch_results[bi]
    if "last_logits" not in a or "last_logits" not in b:
        pytest.fail(f"{_case_id(case)}: no last_logits (adapter line keys {sorted(a)}, base line keys {sorted(b)})")
    change = np_llama.rel_l2(a["last_logits"], b["last_logits"])
    ref_change = np_llama.rel_l2(case["last_logits"], CASES[bi]["last_logits"])
    assert change > 0.5 * ref_change, (f"{_case_id(case)}: adapter changes the logits by {change:.3e} "
                                       f"(rel L2 vs the base line), reference change {ref_change:.3e}")


def test_rank_above_max_lora_rank_is_refused(tmp_path):
    _need_binary()
    big = max(ADAPTERS, key=lambda n: REF["adapters"][n]["max_rank"])
    rank = REF["adapters"][big]["max_rank"]
    limit = rank // 2
    assert limit >= 1
    batch = tmp_path / "one.jsonl"
    batch.write_text(json.dumps({"prompt_tokens": CASES[0]["ids"], "lora": big}) + "\n")
    cmd = [LG_BIN, "generate", "--model", os.path.join(FIX, REF["base"]), "--backend", LG_BACKEND,
           *_lora_args([big]), "--max-lora-rank", str(limit), "--batch", str(batch), "--logits",
           "--max-tokens", "2", "--temperature", "0"]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 1, f"{' '.join(cmd)}\nexpected exit 1, got {p.returncode}\nstderr:\n{p.stderr[-2000:]}"
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    errs = [l for l in lines if "rank" in l.lower()]
    assert len(errs) == 1, f"expected one error line naming the rank, stderr:\n{p.stderr[-2000:]}"
    assert str(rank) in errs[0] and str(limit) in errs[0], f"error line should give rank {rank} and limit {limit}: {errs[0]}"
    assert lines[-1] == errs[0], f"the error should be the last stderr line:\n{p.stderr[-2000:]}"
    assert not any(l.strip().startswith("{") for l in p.stdout.splitlines()), f"output despite the error:\n{p.stdout}"


@pytest.mark.parametrize("name", [None] + ADAPTERS, ids=["base"] + ADAPTERS)
def test_fixture_matches_numpy_oracle(name):
    """The committed files still produce the committed reference (needs no binary)."""
    cfg, W = _oracle()
    Wm = W if name is None else np_lora_merge(W, adapter_modules(os.path.join(FIX, REF["adapters"][name]["dir"])))
    for c in (c for c in CASES if c["adapter"] == name):
        logits = np_llama.forward(cfg, Wm, c["ids"])[-1]
        assert np_llama.rel_l2(logits, c["last_logits"]) < 1e-7, f"{name} prompt {c['prompt']}"
        assert int(np.argmax(logits)) == c["greedy"][0] or c["margins"][0] < 1e-6
