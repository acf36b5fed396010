#!/usr/bin/env python3
"""ktrace_summary.py — summarise a ktrace.patch timeline (LG_KTRACE) of one replayed decode step.

Input lines: step gridid kind block sm t_ns (kind 0 = block start (pdl_trigger), 1 = after
pdl_wait, 2 = block end (GEMV, attention, TMA matmul)). Per kernel (one gridid): blocks, first/last block
start, release R (first pdl_wait return: the predecessor's completion), last end E. Then per
kernel class (by block count and position in the layer): the chain time R(next) - R (what the
kernel costs the step), E - R, the boundary R(next) - E, and the weight stream's TB/s over the
chain time when bytes are given (--bytes=BLOCKS:MB,...; BLOCKSd: that block count after a 2,752-block
kernel, i.e. the down GEMV after gate,up), and the SM hand-off: the median over SMs of the kernel's first block start
on the SM minus the last end there of the kernel before (where that kernel records ends): about 0.5-1 us when the
block could only become resident once its predecessor's blocks left the SM (shared memory, registers),
negative when it was resident beside them.
--layer=N: the step is kernel 0 (embed), then layers of N kernels each; also prints, per position in the layer,
the median chain time over the layers (e.g. N = 9 for W1 without adapters: q,k,v, rope + KV write, attention, o,
add_rmsnorm, gate,up, silu_mul, down, add_rmsnorm; twenty-third session, docs/benchmarks.md).
With --layer, kernels that record block ends also get, per position: the last start - release, the last end -
the mean end (imbalance: what a perfectly balanced split could take back at most), the last end - the 10th
percentile; --sm adds, per such position, each SM's mean over the layers of (its last block's end - the mean of
those ends over the kernel's SMs), the SMs more than 1.5 us early or late, and the correlation of those means between even and odd layers (near
1: a property of the SM, not of the layer; twenty-fourth session, docs/benchmarks.md).
Usage: ktrace_summary.py ktrace.txt [--bytes=1536:100.66,512:33.55,512d:90.18,2752:180.35] [--layer=N [--sm]]
"""
import sys, collections, statistics


def us(a, b):
    """(a - b) in us, None when either is missing."""
    return None if a is None or b is None else (a - b) / 1000


def median(xs):
    """median of the values that are not None; nan when none is"""
    v = [x for x in xs if x is not None]
    return statistics.median(v) if v else float('nan')


def print_balance(rows, per, layers, by_sm):
    """Per position in the layer, for kernels that record block ends: how unevenly the blocks finish (what a
    perfectly balanced split could take back at most) and, with by_sm, each SM's lead or lag."""
    print(" per layer, kernels that record block ends: median us over the layers of: last start - release,")
    print("   last end - mean end (imbalance), last end - 10th-percentile end, mean end - release, last end - release")
    for j in range(per):
        rs = [rows[1 + l * per + j] for l in range(layers)]
        if rs[0]['E'] is None or rs[0]['R'] is None:
            continue
        m = lambda f: median(f(r) for r in rs)
        print(f"  pos {j} ({rs[0]['nb']} blocks): late start {m(lambda r: us(r['s1'], r['R'])):6.2f}  imbalance "
              f"{m(lambda r: us(r['E'], r['Em'])):6.2f}  tail {m(lambda r: us(r['E'], r['E10'])):6.2f}  "
              f"mean end {m(lambda r: us(r['Em'], r['R'])):6.2f}  last end {m(lambda r: us(r['E'], r['R'])):6.2f}")
        if not by_sm:
            continue
        # sm -> per layer (the SM's last block end - the mean of those over the kernel's SMs), us
        rel = collections.defaultdict(list)
        for r in rs:
            mean_end = statistics.mean(r['esm'].values())
            for sm, t in r['esm'].items():
                rel[sm].append((t - mean_end) / 1000)
        sms = sorted(x for x in rel if len(rel[x]) == len(rs))
        mean = {x: statistics.mean(rel[x]) for x in sms}
        ev = [statistics.mean(rel[x][0::2]) for x in sms]
        od = [statistics.mean(rel[x][1::2]) for x in sms]
        corr = statistics.correlation(ev, od) if len(sms) > 2 and len(rs) > 1 else float('nan')
        out = ' '.join(f"{x}:{mean[x]:+.1f}" for x in sms if abs(mean[x]) > 1.5)
        print(f"    by SM: even/odd layer correlation {corr:.2f}; more than 1.5 us off the mean: {out or 'none'}")


def main():
    fn = sys.argv[1]
    bytes_by_nb = {}
    per = 0
    by_sm = '--sm' in sys.argv[2:]
    for a in sys.argv[2:]:
        if a.startswith('--layer='):
            per = int(a.split('=', 1)[1])
        if a.startswith('--bytes='):
            for kv in a.split('=', 1)[1].split(','):
                k, v = kv.split(':')
                bytes_by_nb[k] = float(v)
    steps = collections.defaultdict(list)
    for line in open(fn):
        p = line.split()
        if len(p) != 6:
            continue
        steps[int(p[0])].append(tuple(int(x) for x in p[1:]))
    for step in sorted(steps):
        recs = steps[step]
        g = collections.defaultdict(lambda: {'b': set(), 's': [], 'w': [], 'e': [], 'ssm': [], 'esm': {}})
        for gid, kind, blk, sm, t in recs:
            d = g[gid]
            d['b'].add(blk)
            (d['s'] if kind == 0 else d['w'] if kind == 1 else d['e']).append(t)
            if kind == 0:
                d['ssm'].append((sm, t))
            elif kind == 2:
                d['esm'][sm] = max(d['esm'].get(sm, t), t)
        ks = sorted(g)
        t0 = min(min(g[k]['s'] or g[k]['w']) for k in ks)
        rows = []
        for k in ks:
            d = g[k]
            R = min(d['w']) if d['w'] else None
            prev = g[ks[ks.index(k) - 1]]['esm'] if ks.index(k) else {}
            first = {}
            for sm, t in d['ssm']:
                first[sm] = min(first.get(sm, t), t)
            ho = [t - prev[sm] for sm, t in first.items() if sm in prev]
            rows.append(dict(gid=k, esm=d['esm'], ho=statistics.median(ho) if ho else None, nb=len(d['b']), s0=min(d['s']) - t0 if d['s'] else None,
                             s1=max(d['s']) - t0 if d['s'] else None, R=R - t0 if R is not None else None,
                             E=max(d['e']) - t0 if d['e'] else None,
                             Em=statistics.mean(d['e']) - t0 if d['e'] else None,
                             E10=sorted(d['e'])[len(d['e']) // 10] - t0 if d['e'] else None))
        span = max(max(x for x in (r['E'], r['R'], r['s1']) if x is not None) for r in rows)
        print(f"== step {step}: {len(rows)} kernels, {len(recs)} records, span {span/1000:.1f} us")
        print(" i    blocks  start0  start1   release     end    chain  E-R  next-E  (us from the step's first block)")
        cls = collections.defaultdict(list)
        chains = []
        for i, r in enumerate(rows):
            nxt = rows[i + 1]['R'] if i + 1 < len(rows) else None
            chain, er, ne = us(nxt, r['R']), us(r['E'], r['R']), us(nxt, r['E'])
            chains.append(chain)
            cls[f"{r['nb']}<-{rows[i-1]['nb'] if i else 0}"].append((chain, er, ne, us(r['R'], r['s0']),
                                                                   None if r['ho'] is None else r['ho'] / 1000))
            if i < 12 or i >= len(rows) - 8:
                f = lambda v: '   -   ' if v is None else f"{v/1000:8.1f}"
                h = lambda v: '   -  ' if v is None else f"{v:6.2f}"
                print(f"{i:3d} {r['nb']:8d} {f(r['s0'])} {f(r['s1'])} {f(r['R'])} {f(r['E'])} {h(chain)} {h(er)} {h(ne)}")
        print(" class (blocks): n, median chain us, median E-R, median next-E, median early start (R - first start), SM hand-off, TB/s over chain")
        for nb, v in sorted(cls.items(), key=lambda kv: -len(kv[1])):
            med = lambda j: median(x[j] for x in v)
            mb = bytes_by_nb.get(nb.split('<-')[0] + ('d' if nb.endswith('<-2752') else ''))
            bw = f"{mb / med(0):.2f} TB/s" if mb and med(0) == med(0) else ''
            tot = sum(x[0] for x in v if x[0] is not None)
            print(f"  {nb:>12s}: {len(v):3d}  chain {med(0):7.2f}  E-R {med(1):7.2f}  next-E {med(2):6.2f}  early {med(3):6.2f}  hand-off {med(4):6.2f}  sum {tot:8.1f}  {bw}")
        if per > 0:
            layers = (len(rows) - 1) // per
            pos = []
            for j in range(per):
                pos.append((rows[1 + j]['nb'], median(chains[1 + l * per + j] for l in range(layers))))
            print(f" per layer ({layers} layers of {per} kernels), median chain us by position (blocks):")
            print("  " + "  ".join(f"{c:.2f} ({nb})" for nb, c in pos) + f"  = {sum(c for _, c in pos):.1f}")
            print_balance(rows, per, layers, by_sm)

main()
