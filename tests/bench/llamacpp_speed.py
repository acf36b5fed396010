#!/usr/bin/env python3
"""llamacpp_speed.py — llama.cpp's prompt and decode speed through llama-cpp-python, for
cpu_vs_llamacpp.py (which runs it under LG_LLAMACPP_PY, a Python with llama-cpp-python).

    python llamacpp_speed.py MODEL THREADS IDS N_DECODE

IDS: comma-separated prompt token ids, evaluated in one call (n_batch = their count); then
N_DECODE greedy tokens, one eval each. Prints one JSON line: prefill and decode tok/s, the
process's max RSS, and its RSS before the model was loaded (the interpreter's share).
"""
import json
import resource
import sys
import time

import llama_cpp
import numpy as np
from llama_cpp import Llama


def rss_kb():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))


def main():
    model, threads, ids, n_dec = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3].split(",")], int(sys.argv[4])
    base = rss_kb()
    m = Llama(model, n_ctx=4096, n_batch=max(512, len(ids)), n_threads=threads, n_threads_batch=threads,
              verbose=False)
    t0 = time.perf_counter()
    m.eval(ids)
    t1 = time.perf_counter()
    n_vocab = m.n_vocab()
    for _ in range(n_dec):  # greedy on the last position's logits (the only ones computed)
        last = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(m.ctx, -1), shape=(n_vocab,))
        m.eval([int(np.argmax(last))])
    t2 = time.perf_counter()
    print(json.dumps({"prefill_tok_s": len(ids) / (t1 - t0), "decode_tok_s": n_dec / (t2 - t1),
                      "max_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "base_rss_kb": base}))


if __name__ == "__main__":
    main()
