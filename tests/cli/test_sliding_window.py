"""A model with sliding-window attention (Mistral, Qwen2 with
use_sliding_window) is served with its window: a query attends to the last
`sliding_window` keys only, at any context. The model is the tiny golden
fixture with its config.json turned into Mistral's by the test; the
reference is the numpy float64 forward (tests/golden/np_llama.py), which
models the window as transformers does. The golden fixtures
(tests/golden/fixtures/*_sw*) hold the same check against transformers."""
import json
import os
import shutil
import sys

import numpy as np
import pytest

from test_cli import LG_BIN, ROOT, run

sys.path.insert(0, os.path.join(ROOT, "tests", "golden"))
import np_llama  # noqa: E402

BASE = os.path.join(ROOT, "tests", "golden", "lora_fixtures", "base")


@pytest.fixture
def mistral(tmp_path):
    d = tmp_path / "mistral_sw16"
    shutil.copytree(BASE, d)
    cfg = json.load(open(d / "config.json"))
    cfg.update(architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=16)
    json.dump(cfg, open(d / "config.json", "w"))
    return str(d)


def _last_logits(model, ids, *extra):
    p = run("generate", "--model", model, "--prompt-tokens", ",".join(map(str, ids)), "--max-tokens", "1",
            "--temperature", "0", "--json", "--logits", *extra)
    assert p.returncode == 0, p.stderr
    return np.asarray(json.loads(p.stdout.strip().splitlines()[-1])["last_logits"])


def test_longer_context_than_the_window_is_served_with_the_window(mistral):
    ids = [(7 * i + 3) % 200 for i in range(40)]
    got = _last_logits(mistral, ids)
    cfg, W = np_llama.load_dir(mistral)
    want = np_llama.forward(cfg, W, ids)[-1]
    assert np_llama.rel_l2(got, want) < 1e-4
    # the window changes the result: the same weights read as Llama (no window) differ
    full = _last_logits(BASE, ids)
    assert np_llama.rel_l2(full, want) > 1e-3


def test_within_the_window_it_is_full_attention(mistral):
    ids = [5, 9, 11, 3]
    assert np_llama.rel_l2(_last_logits(mistral, ids), _last_logits(BASE, ids)) < 1e-6
