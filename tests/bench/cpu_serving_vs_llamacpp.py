#!/usr/bin/env python3
"""cpu_serving_vs_llamacpp.py — the default model served on the CPU (2 threads) by `loragate serve`
and by llama_cpp.server (llama-cpp-python's OpenAI server) on the same GGUF, in one run:

  1. one streamed greedy chat completion of up to 128 tokens: time to the first content chunk
     (TTFT) and chunks a second after it (tok/s; each chunk is one token on both servers);
  2. 8 concurrent streamed completions (128 tokens each): on loragate, each with its own LoRA
     adapter (8 synthetic rank-8 q,v adapters, tests/e2e/synth_adapter.py, uploaded first);
     llama.cpp applies one adapter set to every request of a context, so it cannot serve 8
     adapters at once: it gets the same 8 requests without adapters, and its server handles
     them one after another (--interrupt_requests False: a new request waits instead of cutting
     the running one off). Aggregate tok/s = all chunks / wall time of the 8.

    LG_LLAMACPP_PY=/path/to/venv/bin/python .venv/bin/python tests/bench/cpu_serving_vs_llamacpp.py

Env: LG_BIN (default build/loragate), LG_LLAMACPP_PY (its venv also needs llama-cpp-python[server]).
"""
import concurrent.futures as cf
import os
import socket
import subprocess
import sys
import tempfile
import time
import pathlib

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from serve_fixture import SMOLLM2, Serve  # noqa: E402
from synth_adapter import smollm2_adapter  # noqa: E402

PY = os.environ.get("LG_LLAMACPP_PY")
PROMPT = "Write a long story about a dragon who learns to bake bread, with many details."
N = 128


def stream(client, url, model, headers=None):
    t0 = time.perf_counter()
    first = last = None
    n = 0
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": N, "temperature": 0,
            "stream": True}
    with client.stream("POST", url, json=body, headers=headers or {}) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            if '"content":"' in line.replace(" ", "") and '"content":""' not in line.replace(" ", ""):
                now = time.perf_counter()
                first = first or now
                last = now
                n += 1
    return {"ttft_s": first - t0, "tokens": n, "tok_s": (n - 1) / (last - first) if n > 1 else 0.0}


def concurrent(client_fn, url, models, headers=None):
    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(len(models)) as ex:
        res = list(ex.map(lambda m: stream(client_fn(), url, m, headers), models))
    wall = time.perf_counter() - t0
    return sum(r["tokens"] for r in res) / wall, res


def report(name, one, agg, res):
    print(f"{name}: one stream TTFT {one['ttft_s'] * 1000:.0f} ms, {one['tok_s']:.1f} tok/s ({one['tokens']} tokens); "
          f"8 concurrent: {agg:.1f} tok/s aggregate (tokens {[r['tokens'] for r in res]}, "
          f"TTFT {min(r['ttft_s'] for r in res):.2f}-{max(r['ttft_s'] for r in res):.2f} s)", flush=True)


def ours():
    tmp = pathlib.Path(tempfile.mkdtemp())
    s = Serve(tmp, SMOLLM2, "--served-model-name", "smollm2", "--engine-threads", "2")
    try:
        s.tenant("bench")
        key = s.key("bench")
        with s.client(key) as c:
            for i in range(8):
                cfg, w = smollm2_adapter(seed=100 + i, rank=8)
                r = c.post("/v1/adapters", data={"name": f"a{i}"}, files={"config": ("c", cfg), "weights": ("w", w)})
                assert r.status_code == 201, r.text
        mk = lambda: s.client(key, timeout=300)  # noqa: E731
        stream(mk(), "/v1/chat/completions", "smollm2")  # warm-up
        one = stream(mk(), "/v1/chat/completions", "smollm2")
        stream(mk(), "/v1/chat/completions", "a0")  # the adapters' first use
        agg, res = concurrent(mk, "/v1/chat/completions", [f"a{i}" for i in range(8)])
        report("loragate serve", one, agg, res)
    finally:
        s.stop()


def llama():
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]
    p = subprocess.Popen([PY, "-m", "llama_cpp.server", "--model", SMOLLM2, "--n_threads", "2", "--n_threads_batch",
                          "2", "--n_ctx", "4096", "--interrupt_requests", "False", "--host", "127.0.0.1",
                          "--port", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(base + "/v1/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        mk = lambda: httpx.Client(base_url=base, timeout=600)  # noqa: E731
        stream(mk(), "/v1/chat/completions", "x")  # warm-up
        one = stream(mk(), "/v1/chat/completions", "x")
        agg, res = concurrent(mk, "/v1/chat/completions", ["x"] * 8)
        report("llama_cpp.server (no adapters)", one, agg, res)
    finally:
        p.terminate()
        p.wait(20)


if __name__ == "__main__":
    ours()
    if PY:
        llama()
