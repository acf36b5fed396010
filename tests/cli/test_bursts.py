"""
test_bursts.py — decode bursts (engine.c burst_next): the next decode step is
enqueued, with its input tokens taken on the device from the step before,
while the host still reads the previous step's tokens. They must give
exactly what step-by-step decoding gives: the same tokens, logprobs, finish
reasons and usage, for requests that stop, hit their length or run long.

The CPU backend samples on the host unless LG_CPU_DEVICE_SAMPLE=1 gives it
the backend `sample` slot (engine/backend/sampling.h's own functions); with it, the
CPU runs the engine's device-sampling paths, bursts included. The reference
is the same batch sampled on the host, and the device path with bursts off
(LG_BURST=0).

With LG_BACKEND=cuda (and LG_GENERATE_EXTRA, e.g. "--dtype f16", as the
golden tests) the same tests run on the GPU: the reference is then
LG_HOST_SAMPLE=1, and the device sampler is the GPU's.

Env: LG_BIN, LG_SMOLLM2_GGUF (as test_cli.py), LG_BACKEND, LG_GENERATE_EXTRA.
"""
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LG_BIN = os.environ.get("LG_BIN", os.path.join(ROOT, "build", "loragate"))
GGUF = os.environ.get("LG_SMOLLM2_GGUF", os.path.join(ROOT, ".models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
LORA_FIX = os.path.join(ROOT, "tests", "golden", "lora_fixtures")
TINY = os.path.join(ROOT, "tests", "golden", "fixtures", "llama_mha_f32")
BACKEND = os.environ.get("LG_BACKEND", "cpu")
EXTRA = os.environ.get("LG_GENERATE_EXTRA", "").split()

if BACKEND == "cpu":
    HOST = {"LG_CPU_DEVICE_SAMPLE": "0", "LG_BURST": "1"}
    DEVICE_STEPWISE = {"LG_CPU_DEVICE_SAMPLE": "1", "LG_BURST": "0"}
    DEVICE_BURSTS = {"LG_CPU_DEVICE_SAMPLE": "1", "LG_BURST": "1"}
else:
    HOST = {"LG_HOST_SAMPLE": "1", "LG_BURST": "1"}
    DEVICE_STEPWISE = {"LG_HOST_SAMPLE": "0", "LG_BURST": "0"}
    DEVICE_BURSTS = {"LG_HOST_SAMPLE": "0", "LG_BURST": "1"}


def generate(env, *args, timeout=300):
    if not os.access(LG_BIN, os.X_OK):
        pytest.skip(f"loragate binary not found at {LG_BIN}")
    p = subprocess.run([LG_BIN, "generate", *args, "--threads", "2", "--backend", BACKEND, *EXTRA], cwd=ROOT,
                       capture_output=True, text=True, timeout=timeout, env=dict(os.environ, **env))
    assert p.returncode == 0, p.stderr
    out = [json.loads(l) for l in p.stdout.splitlines()]
    stats = [o.pop("stats") for o in out if "stats" in o]
    assert len(stats) == 1, out
    return out, stats[0]


def batch_file(tmp_path, lines):
    f = tmp_path / "batch.jsonl"
    f.write_text("".join(json.dumps(l) + "\n" for l in lines))
    return str(f)


def test_bursts_give_the_step_by_step_results(tmp_path):
    """Greedy and seeded sampled requests of different lengths, one with a
    stop string, one with logprobs: the same output on the host sampler, the
    device sampler step by step, and the device sampler in bursts; the bursts
    run (chained steps), and requests ending inside one are not counted twice."""
    if not os.path.exists(GGUF):
        pytest.skip(f"default model not found at {GGUF}")
    prompts = ["Once upon a time", "The capital of France is", "def fib(n):", "List three colors:", "Hello",
               "Tell me a joke about cats", "1, 2, 3,", "Water boils at"]
    lines = []
    for i, p in enumerate(prompts):
        d = {"prompt": p, "max_tokens": [5, 40, 17, 33, 8, 40, 25, 12][i]}
        if i % 2:
            d.update(temperature=0.8, seed=100 + i)
        if i == 3:
            d["logprobs"] = 3
        lines.append(d)
    f = batch_file(tmp_path, lines)
    ref, ref_st = generate(HOST, "--model", GGUF, "--batch", f, "--stats")
    step, step_st = generate(DEVICE_STEPWISE, "--model", GGUF, "--batch", f, "--stats")
    burst, burst_st = generate(DEVICE_BURSTS, "--model", GGUF, "--batch", f, "--stats")
    assert step == ref
    assert burst == ref
    assert {o["finish_reason"] for o in ref} == {"stop", "length"}  # both ways of ending inside a burst
    assert ref_st["chained_steps"] == 0 and step_st["chained_steps"] == 0
    assert burst_st["chained_steps"] >= burst_st["decode_steps"] // 2, burst_st
    assert burst_st["decode_tokens"] == ref_st["decode_tokens"] == sum(
        o["usage"]["completion_tokens"] for o in ref) - len(ref)  # each first token comes from the prefill


def test_mixed_batch_on_the_fixture_model(tmp_path):
    """The golden fixture model (no download needed, so it also runs on the
    GPU machine): greedy rows and seeded rows under top-k, top-p and min-p,
    logprobs, and lengths from 1 to 30 tokens, step by step and in bursts."""
    lines = []
    for i in range(9):
        d = {"prompt_tokens": [3 + i, 17, 40 + 2 * i, 9], "max_tokens": [1, 30, 4, 17, 9, 25, 2, 12, 30][i]}
        if i % 3 == 1:
            d.update(temperature=0.9, seed=7 + i)
        if i % 3 == 2:
            d.update(temperature=1.1, seed=50 + i)
        if i in (4, 5):
            d["logprobs"] = 4
        lines.append(d)
    args = ["--model", TINY, "--batch", batch_file(tmp_path, lines), "--stats", "--top-k", "20", "--top-p", "0.9",
            "--min-p", "0.02"]
    ref, _ = generate(HOST, *args)
    step, _ = generate(DEVICE_STEPWISE, *args)
    burst, st = generate(DEVICE_BURSTS, *args)
    assert [o["tokens"] for o in step] == [o["tokens"] for o in ref]
    assert [o["tokens"] for o in burst] == [o["tokens"] for o in ref]
    assert [o["usage"] for o in burst] == [o["usage"] for o in ref]
    assert burst == step  # logprobs too: the same device computation, step by step or in bursts
    assert st["chained_steps"] > 0, st


def test_stop_string_inside_a_burst(tmp_path):
    """A stop string ends the request at the same token with bursts."""
    if not os.path.exists(GGUF):
        pytest.skip(f"default model not found at {GGUF}")
    args = ["--model", GGUF, "--prompt", "1, 2, 3, 4, 5,", "--max-tokens", "30", "--stop", " 8", "--json",
            "--stats"]
    ref, _ = generate(HOST, *args)
    burst, st = generate(DEVICE_BURSTS, *args)
    assert burst == ref and ref[0]["finish_reason"] == "stop" and st["chained_steps"] > 0


def test_adapters_in_bursts(tmp_path):
    """Sequences with different LoRA adapters (and none) in one burst: the
    peft fixtures' model, greedy, the same tokens as step by step."""
    base = os.path.join(LORA_FIX, "base")
    if not os.path.isdir(base):
        pytest.skip("lora fixtures missing")
    names = ["r8_layer1", "r4_patterns", "r1_qv"]
    lines = [{"prompt_tokens": [5 + i, 6, 7 + i], "max_tokens": 6 + 3 * i,
              **({"lora": names[i % 3]} if i % 4 else {})} for i in range(6)]
    f = batch_file(tmp_path, lines)
    args = ["--model", base, "--batch", f, "--stats", "--max-lora-rank", "16"]
    for n in names:
        args += ["--lora", f"{n}={os.path.join(LORA_FIX, n)}"]
    ref, _ = generate(HOST, *args)
    burst, st = generate(DEVICE_BURSTS, *args)
    assert burst == ref and st["chained_steps"] > 0, st


def test_penalties_and_host_rows_are_stepwise(tmp_path):
    """Penalties need the step before's token on the host, so a batch where
    every request has them runs step by step (and gives the same tokens)."""
    if not os.path.exists(GGUF):
        pytest.skip(f"default model not found at {GGUF}")
    args = ["--model", GGUF, "--prompt", "Say hello hello hello", "--max-tokens", "12", "--temperature", "0.7",
            "--seed", "3", "--frequency-penalty", "1.2", "--presence-penalty", "0.5", "--json", "--stats"]
    ref, _ = generate(HOST, *args)
    burst, st = generate(DEVICE_BURSTS, *args)
    assert burst == ref and st["chained_steps"] == 0, st


def test_penalties_from_a_one_token_prompt_are_stepwise(tmp_path):
    """Requests with penalties and a one-token prompt (or a prompt the prefix
    cache holds but its last token): their first step is one token, like a
    decode step, and its rows have no penalty pairs yet (nothing generated).
    It must not start a burst either; the golden device-against-host
    penalties test found that on the GPU (2026-11-27)."""
    lines = [{"prompt_tokens": [17], "temperature": t, "seed": s} for s, t in ((1, 0.7), (2, 1.0), (3, 0.0))]
    f = batch_file(tmp_path, lines)
    args = ["--model", TINY, "--batch", f, "--max-tokens", "12", "--frequency-penalty", "1.2",
            "--presence-penalty", "0.6", "--stats"]
    ref, _ = generate(HOST, *args)
    burst, st = generate(DEVICE_BURSTS, *args)
    assert [o["tokens"] for o in burst] == [o["tokens"] for o in ref]
    assert st["chained_steps"] == 0, st
