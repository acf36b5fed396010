#!/usr/bin/env python3
"""Summarise a cupti_trace.c timeline: the GPU's steps, where a step's span goes.

  python3 tests/gpu/cupti_summary.py trace.txt [--gap-us 15] [--prefill 2] [--decode 5] [--chain I,J] [--prefill-chain N]
      [--layer-chain I,J]

The GPU's records (kernels, copies, memsets) are cut into steps wherever the GPU
idles longer than --gap-us. A step with a kernel of more than 300 us or more
than 200 kernels is counted as a prefill step; the last --prefill of them, and
the last --decode others, are printed with: span, busy time (the union of
their records, kernels under programmatic dependent launch overlap), idle time
inside, the longest idle gaps with the records on either side, time by kernel
(name cut at its first '(' or '<'), and the host calls that overlap the step
and took longest. --chain I,J,..: for those decode steps after the last
prefill, each kernel's time in the step's chain (previous kernel's end to its
own end), summed by kernel; under programmatic dependent launch a kernel's
own duration includes its wait, its chain time does not. --prefill-chain N:
the same for the last N prefill-sized steps. --layer-chain I: decode step I
after the last prefill cut into its layers (the period of its kernel sequence),
each position's chain time as the median, lowest and highest over the layers."""
import argparse
import collections
import re


def short(name):
    name = re.sub(r"^_Z\d+", "", name)
    m = re.match(r"[A-Za-z_][A-Za-z0-9_]*", name)
    return (m.group(0) if m else name)[:48]


def load(path):
    gpu, api, dropped = [], [], 0
    for line in open(path, errors="replace"):
        f = line.split()
        if not f:
            continue
        if f[0] == "K":
            gpu.append((int(f[1]), int(f[2]), short(f[9]) if len(f) > 9 else "?", int(f[4]), f[5]))
        elif f[0] == "M":
            gpu.append((int(f[1]), int(f[2]), f[5] + ":" + f[4], 0, ""))
        elif f[0] == "A":
            api.append((int(f[1]), int(f[2]), f[4]))
        elif f[0] == "D":
            dropped += int(f[1])
    gpu.sort()
    api.sort()
    return gpu, api, dropped


def steps(gpu, gap_ns):
    """Cut at idle gaps; a piece without kernels (the step's uploads) joins the next."""
    out, cur, end = [], [], None
    for r in gpu:
        if cur and r[0] - end > gap_ns and any(x[4] for x in cur):
            out.append(cur)
            cur = []
        cur.append(r)
        end = r[1] if len(cur) == 1 else max(end, r[1])
    if cur:
        out.append(cur)
    return out


def report(step, api, label, top):
    t0, t1 = step[0][0], max(r[1] for r in step)
    busy, gaps, end, prev = 0, [], t0, None
    for r in step:
        if r[0] > end:
            gaps.append((r[0] - end, prev, r[2]))
        busy += max(0, r[1] - max(r[0], end))
        if r[1] > end:
            end, prev = r[1], r[2]
    by = collections.defaultdict(lambda: [0, 0])
    for r in step:
        by[r[2]][0] += r[1] - r[0]
        by[r[2]][1] += 1
    graphs = sorted({r[3] for r in step if r[3]})
    print(f"\n== {label}: {len(step)} records, span {(t1 - t0) / 1e3:.1f} us, busy {busy / 1e3:.1f} us, "
          f"idle inside {(t1 - t0 - busy) / 1e3:.1f} us in {len(gaps)} gaps, sum of durations "
          f"{sum(r[1] - r[0] for r in step) / 1e3:.1f} us{', graph ' + str(graphs) if graphs else ''}")
    for g, a, b in sorted(gaps, reverse=True)[:top]:
        print(f"   gap {g / 1e3:8.1f} us  after {a}  before {b}")
    for name, (d, n) in sorted(by.items(), key=lambda kv: -kv[1][0])[:top + 6]:
        print(f"   {d / 1e3:10.1f} us  {n:4d} x  {name}")
    calls = [a for a in api if a[1] > t0 and a[0] < t1]
    for a in sorted(calls, key=lambda a: a[0] - a[1])[:top]:
        print(f"   host {a[2]:32s} {(a[1] - a[0]) / 1e3:9.1f} us, starts {(a[0] - t0) / 1e3:+9.1f} us from the step")


def chain_times(step):
    """The step's kernels and each one's time in the step's chain, in us: from the previous kernel's end (or the
    step's first start) to its own end."""
    ks = [r for r in step if r[4]]
    return ks, [(r[1] - (ks[i - 1][1] if i else ks[0][0])) / 1e3 for i, r in enumerate(ks)]


def chain(step):
    """The chain times summed by name (the TMA matmul's by grid too); returns that and the step's kernel span,
    in us."""
    ks, ct = chain_times(step)
    by = collections.defaultdict(float)
    for r, t in zip(ks, ct):
        by[kname(r)] += t
    return by, (ks[-1][1] - ks[0][0]) / 1e3


def kname(r):
    return r[2][:32] + ("/" + r[4] if r[2].startswith(("gemm_tma", "nvjet")) else "")


def layer_chain(step, label):
    """--layer-chain: the step's kernels repeat with a period (a layer's launches); each position's chain
    time (previous kernel's end to its own end) over the layers: median, lowest, highest, in us."""
    ks, ct = chain_times(step)
    names = [kname(r) for r in ks]
    n = len(names)
    mid = names[n // 4: 3 * n // 4]
    period = next((p for p in range(2, 41) if all(mid[i] == mid[i + p] for i in range(len(mid) - p))), 0)
    if not period:
        print(f"\n{label}: no layer period found")
        return
    s0 = next((s for s in range(1, n - period) if all(names[s + j] == names[s + j + period] for j in range(period))),
              None)
    if s0 is None:
        print(f"\n{label}: no whole layer found")
        return
    layers = (n - s0) // period
    rows, total = [], 0.0
    for p in range(period):
        v = sorted(ct[s0 + k * period + p] for k in range(layers))
        med = v[len(v) // 2]
        total += med
        rows.append(f"  {p:2d} {names[s0 + p]:<44s} {med:8.2f} {v[0]:8.2f} {v[-1]:8.2f}")
    print(f"\n{label}: {layers} layers of {period} kernels; chain us a layer: median, lowest, highest")
    print("\n".join(rows))
    print(f"  layer (sum of medians) {total:.1f} us")


def chain_table(decode, which, title="decode step after the last prefill"):
    """--chain: the chain by kernel of the chosen decode steps after the last prefill (0 = the first);
    --prefill-chain: of the chosen prefill-sized steps."""
    which = [i for i in which if i < len(decode)]
    res = [chain(decode[i]) for i in which]
    if not res:
        return
    names = sorted(set().union(*[r[0] for r in res]), key=lambda n: -res[-1][0].get(n, 0))
    print(f"\nchain by kernel, us; {title}".ljust(56), " ".join(f"{i:>8d}" for i in which))
    print("span".ljust(56), " ".join(f"{r[1]:8.1f}" for r in res))
    for n in names:
        print(n.ljust(56), " ".join(f"{r[0].get(n, 0):8.1f}" for r in res))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--gap-us", type=float, default=15)
    ap.add_argument("--prefill", type=int, default=2)
    ap.add_argument("--decode", type=int, default=3)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--prefill-ms", type=float, default=20, help="a step longer than this is a prefill")
    ap.add_argument("--min-kernels", type=int, default=20, help="shorter steps: only those with this many kernels")
    ap.add_argument("--chain", default="", help="e.g. 0,1,4,14,62: those decode steps' chain by kernel")
    ap.add_argument("--prefill-chain", type=int, default=0, help="the last N prefill-sized steps' chain by kernel")
    ap.add_argument("--layer-chain", default="", help="e.g. 30,60: those decode steps' chain by position in a layer")
    a = ap.parse_args()
    gpu, api, dropped = load(a.trace)
    ss = steps(gpu, a.gap_us * 1e3)
    print(f"{len(gpu)} GPU records, {len(api)} host calls, {dropped} dropped, {len(ss)} steps at gap {a.gap_us} us")
    big = [i for i, s in enumerate(ss) if s[-1][1] - s[0][0] > a.prefill_ms * 1e6]
    big_set = set(big)
    small = [i for i in range(len(ss)) if i not in big_set and sum(r[4] != "" for r in ss[i]) >= a.min_kernels]
    print("prefill-sized steps (ms):", " ".join(f"{(max(r[1] for r in ss[i]) - ss[i][0][0]) / 1e6:.1f}" for i in big))
    for i in big[-a.prefill:] if a.prefill else []:
        report(ss[i], api, f"step {i} (prefill-sized)", a.top)
    for i in small[-a.decode:] if a.decode else []:
        report(ss[i], api, f"step {i}", a.top)
    if a.prefill_chain and big:
        pf = [ss[i] for i in big[-a.prefill_chain:]]
        chain_table(pf, list(range(len(pf))), "prefill-sized step (of the last %d)" % len(pf))
    dec = [ss[i] for i in small if i > big[-1]] if big else []  # decode steps after the last prefill
    if a.chain and dec:
        chain_table(dec, [int(x) for x in a.chain.split(",")])
    if a.layer_chain:
        for i in [int(x) for x in a.layer_chain.split(",")]:
            if i < len(dec):
                layer_chain(dec[i], f"decode step {i} after the last prefill")
    if len(small) > 2:
        spans = sorted(chain(ss[i])[1] for i in small[-48:])  # first kernel's start to last kernel's end
        idle = [(ss[j][0][0] - max(r[1] for r in ss[i])) / 1e3 for i, j in zip(small[-48:], small[-47:]) if j == i + 1]
        print(f"\nlast {len(spans)} other steps: median kernel span {spans[len(spans) // 2]:.1f} us" +
              (f"; GPU idle between consecutive ones: mean {sum(idle) / len(idle):.1f} us" if idle else ""))


if __name__ == "__main__":
    main()
