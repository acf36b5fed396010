"""
test_tp_golden.py — tensor parallelism end to end through `loragate generate`:
a mixed-adapter batch (the PEFT fixtures of tests/golden/lora_fixtures on its
tiny Llama, the base model, and prompts repeated so later copies are served
from the prefix cache) at --tensor-parallel-size 2 against the same batch at 1,
and, at 2, with step graphs against without (LG_NO_GRAPHS=1).

Checked:
  - every line's last_logits at TP=2 within the compute dtype's tolerance of
    TP=1's (1e-5 rel. L2 in f32, 2e-2 in 16 bits: the split sums are rounded
    in another order), greedy tokens equal while the TP=1 path is clear;
  - cached_tokens the same at both sizes (one page table over the ranks);
  - step graphs replay what eager steps compute at TP=2: the same tokens and
    the same decode-step logprobs (the graphs record the all-reduces).
The reference comparisons of every fixture at TP=2 are the other golden
tests under LG_GENERATE_EXTRA="--tensor-parallel-size 2".
Env: LG_BIN, LG_BACKEND, LG_COMPUTE_DTYPE, LG_GENERATE_EXTRA as test_golden.py
(without --tensor-parallel-size: this test sets it).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import np_llama  # noqa: E402
from test_golden import LG_BACKEND, LG_BIN, LG_COMPUTE_DTYPE, LG_GENERATE_EXTRA, ROOT, TIMEOUT  # noqa: E402

FIX = os.path.join(HERE, "lora_fixtures")
ADAPTERS = ["r16_all_linear", "r8_rslora_attn", "r1_qv", "r64_mlp"]
TOL = {"float32": 1e-5, "float16": 2e-2, "bfloat16": 2e-2}[LG_COMPUTE_DTYPE]
EXTRA = [a for a in LG_GENERATE_EXTRA]
if "--tensor-parallel-size" in EXTRA:
    i = EXTRA.index("--tensor-parallel-size")
    del EXTRA[i:i + 2]


def _lines():
    lines = []
    rng = np.random.default_rng(7)
    for k in range(10):
        ids = [int(x) for x in rng.integers(3, 300, size=17 + 9 * k)]
        lora = ADAPTERS[k % len(ADAPTERS)] if k % 5 else None
        line = {"prompt_tokens": ids, "logprobs": 3, "tenant": "t%d" % (k % 2)}
        if lora:
            line["lora"] = lora
        lines.append(line)
    # repeats: the same prompt, adapter and tenant again (prefix-cache hits), and one under another tenant
    lines += [dict(lines[1]), dict(lines[3]), dict(lines[3], tenant="other")]
    return lines


def _run(tmp_path, tp, env=None):
    lines = _lines()
    path = tmp_path / ("batch_tp%d.jsonl" % tp)
    path.write_text("".join(json.dumps(l) + "\n" for l in lines))
    cmd = [LG_BIN, "generate", "--model", os.path.join(FIX, "base"), "--backend", LG_BACKEND, "--batch", str(path),
           "--logits", "--max-tokens", "8", "--temperature", "0", "--sequential",
           *[x for a in ADAPTERS for x in ("--lora", "%s=%s" % (a, os.path.join(FIX, a)))],
           "--tensor-parallel-size", str(tp), *EXTRA]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=8 * TIMEOUT,
                       env={**os.environ, **(env or {})})
    assert p.returncode == 0, f"{' '.join(cmd)}\nexit {p.returncode}\nstderr:\n{p.stderr[-4000:]}"
    outs = [json.loads(s) for s in p.stdout.splitlines() if s.strip().startswith("{")]
    assert len(outs) == len(lines), p.stdout[-2000:]
    for i, o in enumerate(outs):
        assert "error" not in o, f"line {i}: {o['error']}"
    return outs


def test_tp2_matches_tp1(tmp_path):
    one, two = _run(tmp_path, 1), _run(tmp_path, 2)
    for i, (a, b) in enumerate(zip(one, two)):
        err = np_llama.rel_l2(np.asarray(b["last_logits"], np.float64), np.asarray(a["last_logits"], np.float64))
        assert err < TOL, f"line {i}: TP=2 logits differ from TP=1 by rel L2 {err:.3e} (tolerance {TOL:g})"
        assert a["usage"]["cached_tokens"] == b["usage"]["cached_tokens"], f"line {i}: cached tokens differ"
        # greedy tokens while TP=1's choice is clear (top-1 ahead of top-2 by more than the tolerance's effect)
        for s, (ta, tb) in enumerate(zip(a["tokens"], b["tokens"])):
            top = a["logprobs"][s]["top"]
            if len(top) > 1 and top[0][1] - top[1][1] < 50 * TOL:
                break
            assert ta == tb, f"line {i} step {s}: TP=2 token {tb}, TP=1 {ta}"
    # the sequential repeats were served from the cache, the other tenant's copy was not
    assert two[10]["usage"]["cached_tokens"] > 0 and two[11]["usage"]["cached_tokens"] > 0
    assert two[12]["usage"]["cached_tokens"] == 0


def test_tp2_graphs_equal_eager(tmp_path):
    g, e = _run(tmp_path, 2), _run(tmp_path, 2, {"LG_NO_GRAPHS": "1"})
    for i, (a, b) in enumerate(zip(g, e)):
        assert a["tokens"] == b["tokens"], f"line {i}: tokens with step graphs differ from eager"
        la = [t["logprob"] for t in a["logprobs"]]
        lb = [t["logprob"] for t in b["logprobs"]]
        assert np.allclose(la, lb, rtol=0, atol=1e-6), f"line {i}: logprobs {la} vs eager {lb}"


def test_unsplittable_refused(tmp_path):
    """One KV head over two ranks is refused by name, in one line, with a non-zero exit. On the CPU backend,
    whatever LG_BACKEND says: the check is the model's, and a machine with fewer GPUs than ranks would
    refuse the missing device first."""
    cmd = [LG_BIN, "generate", "--model", os.path.join(HERE, "fixtures", "llama_mqa_f32_tied"), "--backend",
           "cpu", "--prompt-tokens", "3,4,5", "--max-tokens", "2", "--tensor-parallel-size", "2", *EXTRA]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode != 0 and "KV heads" in p.stderr, p.stderr[-2000:]
