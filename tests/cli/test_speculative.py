"""
test_speculative.py — speculative decoding (engine/runtime/speculate.c) through
`loragate generate`: the sampled distribution, and exactness with the
features it composes with, on the CPU.

1. Distribution (chi-square). On the tiny golden model llama_mha_f32, 3,000
   seeded samples of the first 5 tokens (temperature 1, top-k 4) without
   speculation, and 3,000 with n-gram speculation under other seeds (the
   prompt repeats a pattern the model continues, so proposals are made and
   both accepted and rejected), compared by scipy's chi-square test of
   homogeneity on the joint outcome (outcomes seen fewer than 10 times in
   both runs pooled into one cell): p > 0.001. The same test with the
   acceptance rule broken (--speculative-accept-rate 1: every proposal
   accepted whatever the model says) must fail it (p < 1e-6), so the test
   can tell a wrong rule from a right one. Once more with a draft model's
   proposals (the model as its own draft, under a third set of seeds).
2. Same seed, same tokens: with the request's own uniforms drawn in order
   for the tokens it emits, speculation changes no sampled token (the tiny
   model, with and without presence / frequency penalties).
3. The default model (SmolLM2-135M, real weights) on the copy-heavy prompt
   set tests/fixtures/speculative/copy_prompts.jsonl: greedy and seeded
   sampled tokens and logprobs equal without speculation, proposals are
   accepted, and stop strings, structured output (a regular expression and
   a JSON schema) and min_tokens-free stops give the same output.
Env: LG_BIN, LG_SMOLLM2_GGUF (as test_cli.py).
"""
import collections
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LG_BIN = os.environ.get("LG_BIN", os.path.join(ROOT, "build", "loragate"))
GGUF = os.environ.get("LG_SMOLLM2_GGUF", os.path.join(ROOT, ".models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
TINY = os.path.join(ROOT, "tests", "golden", "fixtures", "llama_mha_f32")
COPY = os.path.join(ROOT, "tests", "fixtures", "speculative", "copy_prompts.jsonl")

# speculation on for every sequence of a large batch (the policy would turn it down above 16 decoding
# sequences), never paused
SPEC = ["--speculative", "ngram", "--ngram-min", "1", "--num-speculative-tokens", "3",
        "--speculative-max-batch", "64", "--speculative-max-tokens", "512", "--speculative-min-accept", "0"]


def generate(args, lines=None, tmp_path=None, timeout=600):
    if not os.access(LG_BIN, os.X_OK):
        pytest.skip(f"loragate binary not found at {LG_BIN}")
    if lines is not None:
        f = tmp_path / "batch.jsonl"
        f.write_text("".join(json.dumps(l) + "\n" for l in lines))
        args = [*args, "--batch", str(f)]
    p = subprocess.run([LG_BIN, "generate", "--threads", "2", "--json", "--stats", *args], cwd=ROOT,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    out = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    stats = out[-1].pop("stats")
    for o in out:
        assert "error" not in o, o
    return out, stats


# ---- 1. the distribution --------------------------------------------------------------------------------

N = 3000
with open(os.path.join(TINY, "reference.json")) as _f:
    # the fixture's first prompt and a pattern the model often continues
    TINY_PROMPT = json.load(_f)["prompts"][0]["ids"] + [165, 191] * 6


def _samples(tmp_path, seeds, extra):
    lines = [{"prompt_tokens": TINY_PROMPT, "temperature": 1.0, "seed": s, "max_tokens": 5} for s in seeds]
    out, st = generate(["--model", TINY, "--top-k", "4", *extra], lines, tmp_path)
    return collections.Counter(tuple(o["tokens"]) for o in out), st


def _chi2_p(a, b):
    stats = pytest.importorskip("scipy.stats")
    keys = sorted(set(a) | set(b))
    big = [k for k in keys if a[k] + b[k] >= 10]
    rest_a = sum(a[k] for k in keys if a[k] + b[k] < 10)
    rest_b = sum(b[k] for k in keys if a[k] + b[k] < 10)
    table = [[a[k] for k in big] + [rest_a], [b[k] for k in big] + [rest_b]]
    if rest_a + rest_b == 0:
        table = [row[:-1] for row in table]
    return stats.chi2_contingency(table).pvalue, len(table[0])


@pytest.fixture(scope="module")
def plain_samples(tmp_path_factory):
    return _samples(tmp_path_factory.mktemp("plain"), range(N), [])


def test_sampled_distribution_chi_square(plain_samples, tmp_path):
    pytest.importorskip("scipy.stats")
    plain, _ = plain_samples
    spec, st = _samples(tmp_path, range(N, 2 * N), SPEC)
    # proposals were verified, and both kept and refused (else the rule was not exercised)
    assert st["spec_verify_rows"] >= N // 3, st
    assert 0.15 * st["spec_proposed"] < st["spec_accepted"] < 0.85 * st["spec_proposed"], st
    p, cells = _chi2_p(plain, spec)
    assert cells >= 20, cells
    assert p > 0.001, f"speculative samples differ from plain ones: chi-square p = {p:.3g} over {cells} cells"


def test_sampled_distribution_chi_square_draft_model(plain_samples, tmp_path):
    """The same with a draft model's (greedy) proposals: the model as its own draft."""
    pytest.importorskip("scipy.stats")
    plain, _ = plain_samples
    spec, st = _samples(tmp_path, range(2 * N, 3 * N),
                        ["--speculative", "draft", "--draft-model", TINY, "--num-speculative-tokens", "3",
                         "--speculative-max-batch", "64", "--speculative-max-tokens", "512",
                         "--speculative-min-accept", "0"])
    assert st["spec_verify_rows"] >= N, st
    assert 0.15 * st["spec_proposed"] < st["spec_accepted"] < 0.85 * st["spec_proposed"], st
    p, cells = _chi2_p(plain, spec)
    assert p > 0.001, f"draft-model samples differ from plain ones: chi-square p = {p:.3g} over {cells} cells"


def test_chi_square_fails_with_a_broken_acceptance_rule(plain_samples, tmp_path):
    """--speculative-accept-rate 1 takes every proposal whatever the model says: the test above must see it."""
    pytest.importorskip("scipy.stats")
    plain, _ = plain_samples
    broken, st = _samples(tmp_path, range(N, 2 * N), SPEC + ["--speculative-accept-rate", "1"])
    assert st["spec_accepted"] == st["spec_proposed"] > 0, st
    p, cells = _chi2_p(plain, broken)
    assert p < 1e-6, f"the chi-square test did not notice a broken acceptance rule: p = {p:.3g}"


# ---- 2. same seed, same tokens ------------------------------------------------------------------------

@pytest.mark.parametrize("pen", [[], ["--presence-penalty", "0.7", "--frequency-penalty", "0.9"]],
                         ids=["plain", "penalties"])
def test_same_seed_same_tokens_tiny(pen, tmp_path):
    lines = [{"prompt_tokens": TINY_PROMPT, "temperature": t, "seed": s, "max_tokens": 24}
             for s in range(40) for t in (0.0, 0.8)]
    plain, _ = generate(["--model", TINY, "--top-k", "8", "--logprobs", "2", *pen], lines, tmp_path)
    spec, st = generate(["--model", TINY, "--top-k", "8", "--logprobs", "2", *pen, *SPEC], lines, tmp_path)
    assert st["spec_accepted"] > 0, st
    assert [o["tokens"] for o in spec] == [o["tokens"] for o in plain]
    for a, b in zip(spec, plain):
        for x, y in zip(a["logprobs"], b["logprobs"]):
            assert x["token"] == y["token"] and abs(x["logprob"] - y["logprob"]) < 1e-4
            assert [t[0] for t in x["top"]] == [t[0] for t in y["top"]]


# ---- 3. the default model on copy-heavy prompts --------------------------------------------------------

def _need_model():
    if not os.path.isfile(GGUF):
        pytest.skip(f"default model not found at {GGUF}")


def _copy_prompts(n=None):
    with open(COPY) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    return rows[:n] if n else rows


def test_copy_prompts_greedy_and_sampled_equal(tmp_path):
    _need_model()
    lines = []
    for i, r in enumerate(_copy_prompts(4)):
        lines.append({"prompt": r["prompt"], "max_tokens": 48})
        lines.append({"prompt": r["prompt"], "max_tokens": 48, "temperature": 0.7, "seed": 100 + i, "logprobs": 2})
    plain, _ = generate(["--model", GGUF], lines, tmp_path)
    spec, st = generate(["--model", GGUF, "--speculative", "ngram"], lines, tmp_path)
    assert st["spec_accepted"] > 0, st
    for a, b in zip(spec, plain):
        assert a["tokens"] == b["tokens"] and a["finish_reason"] == b["finish_reason"]
        for x, y in zip(a.get("logprobs", []), b.get("logprobs", [])):
            assert x["token"] == y["token"] and abs(x["logprob"] - y["logprob"]) < 1e-3


def test_copy_prompt_stop_string_and_structured_output(tmp_path):
    """A stop string inside a stretch of accepted proposals ends the output where it ends without
    speculation; a regular expression's and a JSON schema's masks check proposals too."""
    _need_model()
    text = _copy_prompts(1)[0]["prompt"]
    base = ["--model", GGUF, "--prompt", text, "--max-tokens", "40"]
    runs = [["--stop", "fox"], ["--regex", "[A-Za-z ,.]{1,120}"]]
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"summary": {"type": "string"}},
                                  "required": ["summary"], "additionalProperties": False}))
    runs.append(["--json-schema", str(schema)])
    for extra in runs:
        (a,), _ = generate([*base, *extra])
        (b,), st = generate([*base, *extra, "--speculative", "ngram", "--ngram-min", "1"])
        assert a["tokens"] == b["tokens"] and a["text"] == b["text"], (extra, a["text"], b["text"])
        assert a["finish_reason"] == b["finish_reason"]
