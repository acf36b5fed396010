#!/usr/bin/env python3
"""llamacpp_ref.py — llama.cpp's view of a GGUF model, for test_llamacpp_parity.py.

Runs under a Python that has llama-cpp-python (built from its PyPI source; it is not in
tests/requirements.txt, as it compiles llama.cpp):

    python llamacpp_ref.py MODEL N_GEN < prompts.json > ref.json

prompts.json: a list of strings. For each, with the model's own tokenizer (no BOS added, special
tokens parsed), logits_all on, 2 threads: the prompt's ids, the logits at its last position, and
the greedy continuation of up to N_GEN tokens (ending at EOS) with, at each step, the margin
between the top two logits (where that margin is small, the two engines' rounding may pick
either token).
"""
import json
import sys

import numpy as np
from llama_cpp import Llama


def main():
    model, n_gen = sys.argv[1], int(sys.argv[2])
    prompts = json.load(sys.stdin)
    m = Llama(model, n_ctx=2048, n_threads=2, logits_all=True, verbose=False)
    out = []
    for text in prompts:
        ids = m.tokenize(text.encode(), add_bos=False, special=True)
        m.reset()
        m.eval(ids)
        last = np.array(m.scores[len(ids) - 1], dtype=np.float64)
        toks, margins = [], []
        for _ in range(n_gen):
            row = np.array(m.scores[m.n_tokens - 1], dtype=np.float64)
            top2 = np.sort(row)[-2:]
            t = int(np.argmax(row))
            toks.append(t)
            margins.append(float(top2[1] - top2[0]))
            if t == m.token_eos():
                break
            m.eval([t])
        out.append({"ids": ids, "last_logits": last.tolist(), "tokens": toks, "margins": margins})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
