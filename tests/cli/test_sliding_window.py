"""A model with sliding-window attention (Mistral, Qwen2 with
use_sliding_window) is served exactly or refused, never served wrong:
loragate does not implement the window, and within it the window changes
nothing (every position attends to all earlier ones either way), so a
context no longer than the window is accepted and a longer one refused with
a message naming the window. The model is the tiny golden fixture with its
config.json turned into Mistral's by the test."""
import json
import os
import shutil

import pytest

from test_cli import LG_BIN, ROOT, one_line_error, run

BASE = os.path.join(ROOT, "tests", "golden", "lora_fixtures", "base")


@pytest.fixture
def mistral(tmp_path):
    d = tmp_path / "mistral_sw16"
    shutil.copytree(BASE, d)
    cfg = json.load(open(d / "config.json"))
    cfg.update(architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=16)
    json.dump(cfg, open(d / "config.json", "w"))
    return str(d)


def test_longer_context_than_the_window_is_refused(mistral):
    p = run("generate", "--model", mistral, "--prompt-tokens", "1,2,3", "--max-tokens", "2")
    one_line_error(p, 1)
    assert "sliding-window attention over 16 tokens" in p.stderr and "--ctx 16" in p.stderr


def test_context_within_the_window_is_served(mistral):
    p = run("generate", "--model", mistral, "--ctx", "16", "--prompt-tokens", "1,2,3", "--max-tokens", "4",
            "--json")
    assert p.returncode == 0, p.stderr
    # the same tokens as the same weights read as a Llama model (no window): within 16 positions they agree
    q = run("generate", "--model", BASE, "--ctx", "16", "--prompt-tokens", "1,2,3", "--max-tokens", "4", "--json")
    assert q.returncode == 0, q.stderr
    assert json.loads(p.stdout)["tokens"] == json.loads(q.stdout)["tokens"]
    # a prompt past the window is refused, not served wrong
    r = run("generate", "--model", mistral, "--ctx", "16", "--prompt-tokens", ",".join(["5"] * 20), "--max-tokens", "1")
    assert r.returncode != 0
