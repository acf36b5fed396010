"""
test_cli.py — the `loragate` command line as a user meets it: the generate
contract on the real default model (SmolLM2 GGUF), and bad input answered by
one clear line on stderr with the documented exit code (2 usage, 1 runtime),
never a crash.

Env: LG_BIN (default <repo>/build/loragate), LG_SMOLLM2_GGUF (default
<repo>/.models/SmolLM2-135M-Instruct.Q4_1.gguf).
"""
import json
import os
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LG_BIN = os.environ.get("LG_BIN", os.path.join(ROOT, "build", "loragate"))
GGUF = os.environ.get("LG_SMOLLM2_GGUF", os.path.join(ROOT, ".models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
TINY = os.path.join(ROOT, "tests", "golden", "fixtures", "llama_mha_f32")


def run(*args, timeout=120):
    if not os.access(LG_BIN, os.X_OK):
        pytest.skip(f"loragate binary not found at {LG_BIN}")
    return subprocess.run([LG_BIN, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def need_model():
    if not os.path.exists(GGUF):
        pytest.skip(f"default model not found at {GGUF} (bash deploy/fetch-default-model.sh)")


def one_line_error(p, code):
    assert p.returncode == code, f"exit {p.returncode}, want {code}; stderr: {p.stderr!r}"
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert lines and lines[0].startswith("loragate"), f"stderr: {p.stderr!r}"
    assert not any("Segmentation" in l or "Aborted" in l for l in lines)


def test_chat_answers_the_capital_of_france():
    need_model()
    p = run("generate", "--model", GGUF, "--chat", "--prompt", "What is the capital of France? Answer in one word.", "--max-tokens", "40")
    assert p.returncode == 0, p.stderr
    assert "Paris" in p.stdout


def test_json_contract_and_determinism():
    need_model()
    args = ["generate", "--model", GGUF, "--prompt", "Once upon a time", "--max-tokens", "12", "--temperature", "0.8",
            "--top-p", "0.9", "--top-k", "40", "--seed", "7", "--json"]
    a, b = run(*args), run(*args)
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    ja, jb = json.loads(a.stdout), json.loads(b.stdout)
    assert ja["tokens"] == jb["tokens"], "same seed must give the same output"
    assert len(ja["tokens"]) == 12 and isinstance(ja["text"], str) and ja["finish_reason"] == "length"


def test_prompt_tokens_and_logits():
    p = run("generate", "--model", TINY, "--prompt-tokens", "5,6,7", "--max-tokens", "3", "--json", "--logits")
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)
    with open(os.path.join(TINY, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    assert len(j["tokens"]) == 3 and len(j["last_logits"]) == vocab
    assert j["usage"] == {"prompt_tokens": 3, "cached_tokens": 0, "completion_tokens": 3}


def test_stop_string_is_not_in_the_output():
    need_model()
    base = run("generate", "--model", GGUF, "--prompt", "1, 2, 3, 4,", "--max-tokens", "16", "--json")
    text = json.loads(base.stdout)["text"]
    assert "7" in text, text
    p = run("generate", "--model", GGUF, "--prompt", "1, 2, 3, 4,", "--max-tokens", "16", "--json", "--stop", "7")
    j = json.loads(p.stdout)
    assert j["finish_reason"] == "stop" and "7" not in j["text"] and text.startswith(j["text"])


@pytest.mark.parametrize("args,code", [
    (["generate"], 2),
    (["generate", "--model", "x"], 2),
    (["generate", "--model", "x", "--prompt", "a", "--prompt-tokens", "1"], 2),
    (["generate", "--model", "x", "--prompt", "a", "--temperature", "-1"], 2),
    (["generate", "--model", "x", "--prompt", "a", "--top-p", "0"], 2),
    (["generate", "--model", "x", "--prompt", "a", "--max-tokens", "zero"], 2),
    (["generate", "--model", "x", "--prompt", "a", "--bogus"], 2),
    (["generate", "--model", "x", "--prompt-tokens", "1,-2"], 1),
    (["generate", "--model", "/nonexistent/model", "--prompt", "a"], 1),
    (["generate", "--model", TINY, "--prompt", "a"], 1),                         # no tokenizer
    (["generate", "--model", TINY, "--prompt-tokens", "1,2,99999"], 1),          # id outside the vocab
    (["generate", "--model", TINY, "--prompt-tokens", "1", "--backend", "tpu"], 1),
    (["generate", "--model", TINY, "--prompt-tokens", "1", "--lora", "a=/nonexistent"], 1),
    (["generate", "--model", TINY, "--prompt-tokens", "1", "--use-lora", "a"], 1),
    (["bench", "--model", TINY, "--top-p", "1.5"], 2),
    (["bench", "--model", TINY, "--temperature", "-0.5"], 2),
    (["bench", "--model", TINY, "--frequency-penalty", "2.5"], 2),
    (["generate", "--model", TINY, "--prompt-tokens", "1", "--presence-penalty", "-3"], 2),
    (["nosuchcommand"], 2),
])
def test_bad_input_gives_one_clear_line(args, code):
    one_line_error(run(*args), code)


def test_truncated_and_garbage_model_files(tmp_path):
    need_model()
    with open(GGUF, "rb") as f:
        head = f.read(1 << 20)
    for n in (0, 3, 100, 4096, 1 << 20):
        bad = tmp_path / f"t{n}.gguf"
        bad.write_bytes(head[:n])
        one_line_error(run("generate", "--model", str(bad), "--prompt", "a"), 1)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(os.urandom(5000))
    one_line_error(run("generate", "--model", str(junk), "--prompt", "a"), 1)


def test_batch_reports_bad_lines_in_place(tmp_path):
    f = tmp_path / "b.jsonl"
    f.write_text('{"prompt_tokens":[5,6]}\n{"prompt_tokens":[5,999999]}\n{"prompt_tokens":[7], "max_tokens": 2}\n')
    p = run("generate", "--model", TINY, "--batch", str(f), "--max-tokens", "3")
    assert p.returncode == 0, p.stderr
    out = [json.loads(l) for l in p.stdout.splitlines()]
    assert len(out) == 3 and "tokens" in out[0] and "error" in out[1] and len(out[2]["tokens"]) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt_tokens":[5,6]}\nnot json\n')
    one_line_error(run("generate", "--model", TINY, "--batch", str(bad)), 1)


def test_generate_logprobs_options(tmp_path):
    """--logprobs N adds each token's logprob and N alternatives; a batch line
    may set its own; out-of-range values are refused with one line."""
    p = run("generate", "--model", TINY, "--prompt-tokens", "5,6", "--max-tokens", "3", "--json", "--logprobs", "2")
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout.strip().splitlines()[-1])
    assert [e["token"] for e in j["logprobs"]] == j["tokens"] and all(len(e["top"]) == 2 for e in j["logprobs"])
    assert all(e["logprob"] <= 0 and e["top"][0][1] >= e["top"][1][1] for e in j["logprobs"])
    f = tmp_path / "lp.jsonl"
    f.write_text('{"prompt_tokens":[5,6]}\n{"prompt_tokens":[5,6], "logprobs": 0}\n')
    p = run("generate", "--model", TINY, "--batch", str(f), "--max-tokens", "2")
    assert p.returncode == 0, p.stderr
    out = [json.loads(l) for l in p.stdout.splitlines()]
    assert "logprobs" not in out[0] and [e["top"] for e in out[1]["logprobs"]] == [[], []], out
    f.write_text('{"prompt_tokens":[5,6]}\n{"prompt_tokens":[5], "logprobs": 21}\n')
    one_line_error(run("generate", "--model", TINY, "--batch", str(f)), 1)
    one_line_error(run("generate", "--model", TINY, "--prompt-tokens", "5", "--logprobs", "21"), 2)
    one_line_error(run("generate", "--model", TINY, "--prompt-tokens", "5", "--logprobs", "3"), 2)  # needs --json


def test_bench_with_adapters_warms_up_the_measured_shape():
    """With adapters, `loragate bench` warms up until a pass runs with every
    adapter resident, so the last warm-up pass has the measured batch's
    prefill steps (on a GPU the first pass's requests start as their loads
    finish, in smaller steps of other shapes)."""
    p = run("bench", "--model", TINY, "--num-seqs", "3", "--prompt-len", "8", "--output-len", "5", "--adapters", "2",
            "--rank", "4", "--targets", "q,k,v,o", "--json", "--no-progress")
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout.strip().splitlines()[-1])
    assert j["output_tokens"] == 15 and j["adapter_loads"] == 2, j
    assert j["prefill_steps"] == 1 and j["warmup_prefill_steps"] == j["prefill_steps"], j


def test_bench_settles_between_warm_up_and_batch():
    """--settle-ms idles between the warm-up and the measured batch (outside
    the measured wall time) and says so in the JSON; a bad value is a one-line
    usage error."""
    base = ["bench", "--model", TINY, "--num-seqs", "2", "--prompt-len", "8", "--output-len", "3", "--json",
            "--no-progress"]
    t0 = time.monotonic()
    p = run(*base, "--settle-ms", "1500")
    assert p.returncode == 0, p.stderr
    assert time.monotonic() - t0 >= 1.5  # the sleep happened (a lower bound, not a speed figure)
    j = json.loads(p.stdout.strip().splitlines()[-1])
    assert j["settle_ms"] == 1500 and j["output_tokens"] == 6, j
    p0 = run(*base)
    assert json.loads(p0.stdout.strip().splitlines()[-1])["settle_ms"] == 0
    for bad in ("-1", "60001", "x"):
        one_line_error(run(*base, "--settle-ms", bad), 2)
    one_line_error(run(*base, "--settle-ms", "10", "--workload", "poisson"), 2)  # the fixed batch only


def test_bench_with_sampling_filters():
    """`loragate bench` runs sampled (temperature, top-k, top-p, min-p; with
    penalties; with logprobs) as well as greedy, and says which in its JSON."""
    base = ["bench", "--model", TINY, "--num-seqs", "3", "--prompt-len", "8", "--output-len", "5", "--json",
            "--no-progress"]
    off = {"presence_penalty": 0.0, "frequency_penalty": 0.0, "logprobs": -1}
    for extra, want in (([], {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, **off}),
                        (["--temperature", "0.8", "--top-k", "40", "--top-p", "0.9", "--min-p", "0.05"],
                         {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "min_p": 0.05, **off}),
                        (["--temperature", "1", "--presence-penalty", "-0.5", "--frequency-penalty", "1.5"],
                         {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "presence_penalty": -0.5,
                          "frequency_penalty": 1.5, "logprobs": -1}),
                        (["--logprobs", "5"], {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0,
                                               **off, "logprobs": 5})):
        p = run(*base, *extra)
        assert p.returncode == 0, p.stderr
        j = json.loads(p.stdout.strip().splitlines()[-1])
        assert j["output_tokens"] == 15 and j["decode_steps"] == 4, j
        assert j["sampling"] == pytest.approx(want), j["sampling"]
