"""
test_arch_lora_golden.py — a PEFT adapter on every model family, in a mixed
batch, against transformers + peft float64 references (fixtures written by
make_arch_fixtures.py: each family's fixture holds lora/, an adapter on
every linear module, Phi-3's fused qkv_proj and gate_up_proj included).

Per fixture, one run of the binary serves the whole batch: every prompt
twice, with the adapter and without it, interleaved, so adapter and base
rows share steps:
    $LG_BIN generate --model <fixture> --backend $LG_BACKEND --lora a=<fixture>/lora
            --batch FILE.jsonl --logits --max-tokens 12 --temperature 0
Each line is checked by test_golden.py's rules (last logits rel-L2 below the
dtype's tolerance, greedy tokens equal while the reference step is clear),
and each adapter line must differ from its base line by at least half the
reference's change (an adapter silently ignored fails). Also (no binary):
the committed adapter still reproduces the committed references through the
numpy oracle with the adapter merged.
Env: LG_BIN, LG_BACKEND, LG_GENERATE_EXTRA, LG_COMPUTE_DTYPE as in test_golden.py.
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
from test_golden import (skip_unsplittable, FIXTURES, LG_BACKEND, LG_BIN, LG_COMPUTE_DTYPE, LG_GENERATE_EXTRA, LOGIT_TOL,  # noqa: E402
                         ROOT, TIMEOUT, _fixture_names, _load_ref, compare_tokens)

NAMES = [n for n in _fixture_names() if "lora" in _load_ref(n)]


def test_arch_lora_fixtures_present():
    assert len(NAMES) >= 5, f"expected the families' adapter fixtures under {FIXTURES}: run make_arch_fixtures.py"


@pytest.mark.parametrize("name", NAMES)
def test_arch_lora_mixed_batch(name, tmp_path):
    if not os.access(LG_BIN, os.X_OK):
        pytest.skip(f"loragate binary not found at {LG_BIN} (build it, or set LG_BIN)")
    ref = _load_ref(name)
    model = os.path.join(FIXTURES, name)
    lines, want = [], []
    for base, lora in zip(ref["prompts"], ref["lora"]["prompts"]):
        lines += [{"prompt_tokens": base["ids"], "lora": "a"}, {"prompt_tokens": base["ids"]}]
        want += [(lora, True, base), (base, False, lora)]
    path = tmp_path / "batch.jsonl"
    path.write_text("".join(json.dumps(l) + "\n" for l in lines))
    cmd = [LG_BIN, "generate", "--model", model, "--backend", LG_BACKEND, "--lora",
           "a=" + os.path.join(model, ref["lora"]["dir"]), "--batch", str(path), "--logits", "--max-tokens",
           str(ref["n_greedy"]), "--temperature", "0", *LG_GENERATE_EXTRA]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=4 * TIMEOUT)
    skip_unsplittable(p)
    assert p.returncode == 0, f"{' '.join(cmd)}\nexit {p.returncode}\nstderr:\n{p.stderr[-4000:]}"
    outs = [json.loads(s) for s in p.stdout.splitlines() if s.strip().startswith("{")]
    assert len(outs) == len(lines), f"{len(outs)} results for {len(lines)} lines:\n{p.stdout[-2000:]}"
    tol = max(LOGIT_TOL[ref["weight_dtype"]], LOGIT_TOL[LG_COMPUTE_DTYPE])
    for i, (res, (case, adapted, other)) in enumerate(zip(outs, want)):
        assert "error" not in res, f"line {i}: {res['error']}"
        got = np.asarray(res["last_logits"], dtype=np.float64)
        err = np_llama.rel_l2(got, case["last_logits"])
        assert err < tol, f"{name} line {i} (adapter {adapted}, len {len(case['ids'])}): rel L2 {err:.3e} >= {tol:g}"
        msg = compare_tokens(ref, case, list(res["tokens"]))
        assert msg is None, f"{name} line {i} (adapter {adapted}): {msg}"
        if adapted:
            ref_change = np_llama.rel_l2(case["last_logits"], other["last_logits"])
            assert np_llama.rel_l2(got, other["last_logits"]) > 0.5 * ref_change, f"{name} line {i}: adapter ignored"


@pytest.mark.parametrize("name", NAMES)
def test_arch_lora_fixture_matches_numpy_oracle(name):
    import make_lora_fixtures as mlf
    ref = _load_ref(name)
    cfg, W = np_llama.load_dir(os.path.join(FIXTURES, name))
    Wm = mlf.np_lora_merge(W, mlf.adapter_modules(os.path.join(FIXTURES, name, ref["lora"]["dir"])))
    for p in ref["lora"]["prompts"]:
        assert np_llama.rel_l2(np_llama.forward(cfg, Wm, p["ids"])[-1], p["last_logits"]) < 1e-7
