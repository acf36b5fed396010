"""
constrain_masks.py — how long one token mask takes, over walks through the
JSON Schema corpus (tests/constrain/schemas/), for the 131k-token tekken
vocabulary (and SmolLM2's 49k one with --vocab smollm2).

For each schema, one constrain_tool process compiles it; a seeded walk
(random allowed tokens for 40 steps, then the tool's shortest completion to
the end, as in tests/constrain/test_masks.py, EOS not taken) times the mask
at every step with `timemask`: "cold" is the first walk on a fresh
constraint, whose masks fill its lazy per-state table as they go (each step
either visits a grammar state for the first time or one seen earlier in the
walk; the cold masks of 100 us or more are counted apart as the first
visits, the table fills, which the tool does not report one by one);
"warm" replays the same tokens after `rollback`, every state already in the
table. The same steps are timed on llguidance 1.9.1
(LLMatcher.compute_bitmask, from Python) for scale. Compile time is the
`ready` line's. Prints one table; figures go to docs/benchmarks.md.

Run from the repository root (after building constrain_tool in LG_BUILD_DIR):

    LG_BUILD_DIR=build .venv/bin/python tests/bench/constrain_masks.py [--vocab tekken|smollm2] [--seeds 1]
"""
import argparse
import json
import os
import random
import statistics
import sys
import time
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "constrain"))
import constrain_ref as cr  # noqa: E402


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def bench_one(v, vfile, schema, seed, max_random=40, max_steps=256):
    src = json.dumps(schema)
    cr.index_bytes(v)
    rng = random.Random(seed)
    eos_bits = sum(1 << e for e in v.eos)
    cold, warm, ref_t, toks = [], [], [], []
    ref = cr.RefMatcher(v, "json_schema", src)
    with cr.Tool("json_schema", src, vocab_file=vfile) as tool:
        compile_us = tool.compile_us
        for step in range(max_steps):
            _, us = tool.timemask()
            cold.append(us)
            t0 = time.perf_counter()
            ref.mask()
            ref_t.append((time.perf_counter() - t0) * 1e6)
            _, m = tool.mask()
            non_eos = m & ~eos_bits
            if not non_eos:
                break
            if step < max_random:
                tok = cr.pick_random(rng, non_eos, bin(non_eos).count("1"))
            else:
                comp = tool.completion()
                if not comp:
                    break
                tok = cr.pick_along(v, non_eos, comp)
            assert tool.advance(tok) == "ok"
            ref.advance(tok)
            toks.append(tok)
        n = len(toks)
        if n:
            assert tool.cmd(f"rollback {n}") == "ok"
        for i in range(n + 1):
            _, us = tool.timemask()
            warm.append(us)
            if i < n:
                assert tool.advance(toks[i]) == "ok"
    return compile_us, cold, warm, ref_t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", default="tekken", choices=["tekken", "smollm2"])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--only", default="", help="substring of schema names")
    a = ap.parse_args()
    if not cr.have_tool():
        sys.exit(f"constrain_tool not found at {cr.tool_path()} (set LG_BUILD_DIR)")
    v = cr.tekken_vocab() if a.vocab == "tekken" else cr.smollm2_vocab()
    if v is None:
        sys.exit("mistral-common is not installed (pip install -r tests/requirements.txt)")
    import tempfile
    vfile = v.write(os.path.join(tempfile.mkdtemp(prefix="lgc-bench-"), f"{v.name}.json"))
    comp, cold, warm, ref_t = [], [], [], []
    t0 = time.time()
    for name, schema in cr.corpus():
        if a.only not in name:
            continue
        for s in range(a.seeds):
            c, co, wa, rt = bench_one(v, vfile, schema, zlib.crc32(f"{name}/{s}".encode()))
            comp.append(c)
            cold += co
            warm += wa
            ref_t += rt
    print(f"vocabulary {v.name} ({v.n} ids), {len(comp)} walks, {len(cold)} masks, {time.time() - t0:.0f} s")
    first = [c for c in cold if c >= 100]
    print(f"{'':34s} {'n':>6s} {'p50 us':>8s} {'p99 us':>8s} {'max us':>8s} {'mean us':>8s}")
    for label, xs in (("compile (ready line)", comp), ("mask, cold table (timemask)", cold),
                      ("  of which >= 100 us (first visits)", first),
                      ("mask, warm table (timemask)", warm), ("llguidance compute_bitmask", ref_t)):
        if xs:
            print(f"{label:34s} {len(xs):6d} {pct(xs, 50):8.0f} {pct(xs, 99):8.0f} {max(xs):8.0f} "
                  f"{statistics.mean(xs):8.0f}")


if __name__ == "__main__":
    main()
