#!/usr/bin/env python3
"""cpu_vs_llamacpp.py — the default model on the CPU backend against llama.cpp (llama-cpp-python)
in the same run: a 512-token prompt of fixed random ids, then 128 greedy tokens, batch 1.

    LG_LLAMACPP_PY=/path/to/venv/bin/python python3 tests/bench/cpu_vs_llamacpp.py [--threads 2] [--rounds 3]

Rounds alternate loragate and llama.cpp, so a busy moment of the machine hits both; each
prints prefill tok/s (prompt tokens / the prefill's time), decode tok/s (tokens of decode
steps / their time; loragate's first new token comes out of the prefill step) and max RSS
(llama.cpp's also without its Python interpreter's RSS before the model was loaded). The
summary is the median of the rounds and loragate / llama.cpp. Model loading is not timed.
Env: LG_BIN (default build/loragate), LG_LLAMACPP_PY, LG_GGUF.
"""
import argparse
import json
import os
import random
import resource
import statistics
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("LG_BIN", os.path.join(ROOT, "build", "loragate"))
GGUF = os.environ.get("LG_GGUF", os.path.join(ROOT, ".models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
PY = os.environ.get("LG_LLAMACPP_PY")


def ours(ids, threads, n_dec):
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    p = subprocess.run([BIN, "generate", "--model", GGUF, "--prompt-tokens", ",".join(map(str, ids)),
                        "--max-tokens", str(n_dec + 1), "--threads", str(threads), "--json", "--stats"],
                       capture_output=True, text=True, check=True)
    s = json.loads(p.stdout)["stats"]
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"prefill_tok_s": s["prefill_tokens"] / s["prefill_seconds"],
            "decode_tok_s": s["decode_tokens"] / s["decode_seconds"], "max_rss_kb": rss if rss > before else None}


def llama(ids, threads, n_dec):
    p = subprocess.run([PY, os.path.join(ROOT, "tests", "bench", "llamacpp_speed.py"), GGUF, str(threads),
                        ",".join(map(str, ids)), str(n_dec)], capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--decode", type=int, default=128)
    a = ap.parse_args()
    r = random.Random(7)
    ids = [r.randrange(100, 40000) for _ in range(a.prompt)]
    res = {"loragate": [], "llama.cpp": []}
    for i in range(a.rounds):
        for name, fn in (("loragate", ours), ("llama.cpp", llama)):
            x = fn(ids, a.threads, a.decode)
            res[name].append(x)
            extra = f", without its interpreter {(x['max_rss_kb'] - x['base_rss_kb']) / 1024:.0f} MiB" \
                if "base_rss_kb" in x else ""
            rss = f"{x['max_rss_kb'] / 1024:.0f} MiB" if x["max_rss_kb"] else "n/a"
            print(f"round {i + 1} {name:9s}: prefill {x['prefill_tok_s']:7.1f} tok/s  decode "
                  f"{x['decode_tok_s']:6.1f} tok/s  max RSS {rss}{extra}", flush=True)
    med = {n: {k: statistics.median(x[k] for x in v) for k in ("prefill_tok_s", "decode_tok_s")}
           for n, v in res.items()}
    for k in ("prefill_tok_s", "decode_tok_s"):
        print(f"median {k}: loragate {med['loragate'][k]:.1f}, llama.cpp {med['llama.cpp'][k]:.1f}, "
              f"ratio {med['loragate'][k] / med['llama.cpp'][k]:.2f}x")


if __name__ == "__main__":
    main()
