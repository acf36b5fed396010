"""
lora_reference.py — the HF transformers + peft float64 reference of the tiny
fixture model and its adapters (tests/golden/lora_fixtures/reference.json,
written by tests/golden/make_lora_fixtures.py), as the end-to-end tests use
it: a case by adapter and prompt, and the check of a greedy completion
against it.
"""
import json
import os

import numpy as np

from serve_fixture import LORA_FIX

with open(os.path.join(LORA_FIX, "reference.json")) as f:
    REF = json.load(f)


def ref_case(adapter, prompt):
    """The reference case of `adapter` (None: the base model) on prompt number `prompt`, or None."""
    for c in REF["cases"]:
        if (c["adapter"] or None) == adapter and int(c["prompt"]) == prompt:
            return c


def check_greedy(tokens, first_logprob, c):
    """Greedy tokens equal the reference's while its steps are clear (test_golden.py's rule), and the first
    token's logprob is the log-softmax of the reference's float64 logits within 1e-3."""
    want = c["greedy"]
    for i, (g, w) in enumerate(zip(tokens, want)):
        if c["margins"][i] <= 1e-3 * max(1.0, abs(c["top_logits"][i])):
            break
        assert g == w, f"step {i}: {tokens} vs HF/peft {want}"
    logits = np.asarray(c["last_logits"], dtype=np.float64)
    ref_lp = logits[want[0]] - (logits.max() + np.log(np.exp(logits - logits.max()).sum()))
    assert abs(first_logprob - ref_lp) < 1e-3
