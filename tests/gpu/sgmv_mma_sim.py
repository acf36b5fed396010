"""sgmv_mma_sim.py — host emulation of kernels/lora_shrink_mma.cu's index arithmetic (ldmatrix.x4,
mma.m16n8k16 fragments as PTX documents them, smem ring with SHM_LD padding, k-split across warps, reduction and tmp store) vs a direct product.
Integer-valued inputs so that f32 sums are exact: results must match bit for bit.
Run: python3 tests/gpu/sgmv_mma_sim.py (numpy; a few minutes). Keep it in step with the kernel."""
import numpy as np, itertools, random, sys

THREADS, TM, KC = 128, 32, 64
LD = KC + 8
MULTI_MAX = 3  # LG_LORA_MULTI_MAX (only used for slot arrays)


def cfg(NT):
    NR = 8 * NT
    ST = 6 if NT == 2 else 4 if NT == 4 else 3
    STAGE = (TM + NR) * LD
    return NR, ST, STAGE


def ldm4(sm, addr, lo, hi):
    """addr[lane] = element index of the row start given by lane; returns r[4][32][2] (PTX ldmatrix .x4)
    lo/hi: the bounds of the region this load is allowed to read (one stage's x or A tile, valid columns)."""
    out = np.zeros((4, 32, 2))
    for m in range(4):
        rows = [addr[m * 8 + i] for i in range(8)]
        for a in rows:
            assert a % 8 == 0, "ldmatrix row address not 16-byte aligned"
            assert lo <= a and a + 8 <= hi, ("ldmatrix reads outside its tile", a, lo, hi)
        for l in range(32):
            r, c = l // 4, 2 * (l % 4)
            out[m, l, 0] = sm[rows[r] + c]
            out[m, l, 1] = sm[rows[r] + c + 1]
    return out


def mma(acc, a, b0, b1):
    """acc[32][4] += A(16x16 from a[4][32][2]) * B(16x8 from b0,b1 [32][2]), PTX m16n8k16 .row.col layouts."""
    A = np.full((16, 16), np.nan)
    B = np.full((16, 8), np.nan)
    for l in range(32):
        g, c4 = l // 4, l % 4
        for h in range(2):
            A[g, 2 * c4 + h] = a[0, l, h]
            A[g + 8, 2 * c4 + h] = a[1, l, h]
            A[g, 2 * c4 + 8 + h] = a[2, l, h]
            A[g + 8, 2 * c4 + 8 + h] = a[3, l, h]
            B[2 * c4 + h, g] = b0[l, h]
            B[2 * c4 + 8 + h, g] = b1[l, h]
    assert not np.isnan(A).any() and not np.isnan(B).any()
    D = A @ B
    for l in range(32):
        g, c4 = l // 4, l % 4
        acc[l, 0] += D[g, 2 * c4]
        acc[l, 1] += D[g, 2 * c4 + 1]
        acc[l, 2] += D[g + 8, 2 * c4]
        acc[l, 3] += D[g + 8, 2 * c4 + 1]


class OOB(Exception):
    pass


def block(NT, tmp, ldt, x, ldx, xrows, inn, seg, Aw, rank, s, bx, by, ng, slots, col_off, a_vec, log):
    NR, ST, STAGE = cfg(NT)
    VPR = KC // 8
    FE = 2 * NT * 4
    assert 4 * FE * 32 * 4 <= ST * STAGE * 2
    assert NR * VPR % THREADS == 0 and TM * VPR % THREADS == 0
    si, j0 = by // ng, (by % ng) * NR
    if j0 >= rank:
        return
    a0, e = seg[s] + bx * TM, seg[s + 1]
    if a0 >= e:
        return
    t0, nt = a0, min(e - a0, TM)
    nr = min(NR, rank - j0)
    nc = (inn + KC - 1) // KC
    sm = np.full(ST * STAGE, np.nan)  # nan: never written (ldmatrix of unwritten smem is caught below)
    stage_chunk = [None] * ST  # which chunk a stage holds (for the ring check)
    groups = []  # commit groups: list of sets of chunks loaded (x and A separately)
    pending = set()

    def gA(r, k):  # global read of A row j0+r, col k (A = lw.A + j0*in)
        if not (0 <= j0 + r < rank and 0 <= k < inn):
            raise OOB(("A", j0 + r, k))
        return Aw[j0 + r, k]

    def gX(r, k):
        if not (0 <= t0 + r < xrows and 0 <= k < inn):
            raise OOB(("x", t0 + r, k))
        return x[t0 + r, k]

    def cp16_tile(base, rows, valid_rows, k0, get):
        """the kernel's 16-byte cp.async copies of a [rows][KC] tile; zero-fill past valid_rows or inn"""
        for j in range(rows * VPR // THREADS):
            for tid in range(THREADS):
                i = tid + j * THREADS
                r, v = i // VPR, i % VPR
                k = k0 + v * 8
                ok = r < valid_rows and k < inn
                for q in range(8):
                    sm[base + r * LD + v * 8 + q] = get(r, k + q) if ok else 0.0

    def load_a(c, st):
        base = st * STAGE + TM * LD
        k0 = c * KC
        if a_vec:
            cp16_tile(base, NR, nr, k0, gA)
        else:
            for tid in range(THREADS):
                for i in range(tid, NR * KC, THREADS):
                    r, kk = i // KC, i % KC
                    k = k0 + kk
                    sm[base + r * LD + kk] = gA(r, k) if (r < nr and k < inn) else 0.0
        pending.add(("A", c))

    def load_x(c, st):
        cp16_tile(st * STAGE, TM, nt, c * KC, gX)
        pending.add(("x", c))
        stage_chunk[st] = c

    def commit():
        groups.append(set(pending))
        pending.clear()

    def wait(n):  # groups[: len - n] complete
        return set().union(*groups[: max(0, len(groups) - n)]) if groups else set()

    # prologue
    for c in range(ST - 1):
        if c < nc:
            load_a(c, c)
    for c in range(ST - 1):
        if c < nc:
            load_x(c, c)
        commit()
    acc = np.zeros((4, 2, NT, 32, 4))  # [warp][mt][n][lane][e]
    for c in range(nc):
        done = wait(ST - 2)
        # scalar (non-cp.async) A stores are visible after the barrier regardless of groups
        assert ("x", c) in done, ("x chunk not landed", c)
        assert ("A", c) in done or not a_vec, ("A chunk not landed", c)
        assert stage_chunk[c % ST] == c
        if c + ST - 1 < nc:
            st = (c + ST - 1) % ST
            assert st != c % ST
            load_a(c + ST - 1, st)
            load_x(c + ST - 1, st)
        commit()
        xs = (c % ST) * STAGE
        as_ = xs + TM * LD
        for warp in range(4):
            kc = warp * 16
            af = []
            for mt in range(2):
                addr = []
                for lane in range(32):
                    mi, li = lane >> 3, lane & 7
                    addr.append(xs + (mt * 16 + (mi & 1) * 8 + li) * LD + kc + (mi >> 1) * 8)
                af.append(ldm4(sm, addr, xs, xs + TM * LD))
            for np_ in range(NT // 2):
                addr = []
                for lane in range(32):
                    mi, li = lane >> 3, lane & 7
                    addr.append(as_ + (np_ * 16 + (mi >> 1) * 8 + li) * LD + kc + (mi & 1) * 8)
                bf = ldm4(sm, addr, as_, as_ + NR * LD)
                for mt in range(2):
                    mma(acc[warp, mt, 2 * np_], af[mt], bf[0], bf[1])
                    mma(acc[warp, mt, 2 * np_ + 1], af[mt], bf[2], bf[3])
    # reduction: red[(warp*FE + (mt*NT+n)*4+e)*32 + lane]
    red = np.full(4 * FE * 32, np.nan, dtype=np.float32)
    for warp in range(4):
        for mt in range(2):
            for n in range(NT):
                for e in range(4):
                    for lane in range(32):
                        red[(warp * FE + (mt * NT + n) * 4 + e) * 32 + lane] = acc[warp, mt, n, lane, e]
    assert not np.isnan(red).any()
    for tid in range(THREADS):
        for i in range(tid, FE * 32, THREADS):
            v = ((np.float32(red[i]) + red[FE * 32 + i]) + red[2 * FE * 32 + i]) + red[3 * FE * 32 + i]
            ln, fe = i & 31, i >> 5
            e, f = fe & 3, fe >> 2
            mt, n = f // NT, f % NT
            row = mt * 16 + (ln >> 2) + 8 * (e >> 1)
            col = n * 8 + 2 * (ln & 3) + (e & 1)
            if row < nt and col < nr:
                idx = (t0 + row, si * col_off + j0 + col)
                log.append(idx)
                tmp[idx] = v


def run_case(seg_len, ranks, inn, slots_rank, step_rank=None, cap=None, a_vec=True, ldx_pad=8, seed=0):
    """seg_len: tokens per segment; ranks[s][i]: rank of segment s at slot i (k = len(ranks[0]))."""
    rng = np.random.default_rng(seed)
    k = len(ranks[0])
    seg = np.concatenate([[0], np.cumsum(seg_len)]).astype(int)
    T = int(seg[-1])
    maxr = max(max(r) for r in ranks)
    max_rank = cap if cap and cap > maxr else maxr
    smr = step_rank if step_rank is not None else 0
    rank_h = smr if 0 < smr < max_rank else max_rank
    nr_h = 16 if rank_h <= 16 else 32 if rank_h <= 32 else 64
    NT = nr_h // 8
    ng = (rank_h + nr_h - 1) // nr_h
    ldx = inn + ldx_pad
    x = rng.integers(-3, 4, size=(T, inn)).astype(np.float64)
    A = [[rng.integers(-3, 4, size=(ranks[s][i], inn)).astype(np.float64) for i in range(k)] for s in range(len(seg_len))]
    ldt = k * max_rank + 3
    tmp = np.full((T, ldt), np.nan, dtype=np.float32)
    max_seg = max(seg_len)
    log = []
    for s in range(len(seg_len)):
        for by in range(ng * k):
            for bx in range((max_seg + TM - 1) // TM):
                si = by // ng
                block(NT, tmp, ldt, x, ldx, T, inn, seg, A[s][si], ranks[s][si], s, bx, by, ng, None, max_rank, a_vec, log)
    # each written once
    assert len(log) == len(set(log)), "an element written twice"
    # reference
    for s in range(len(seg_len)):
        for i in range(k):
            r = ranks[s][i]
            for t in range(seg[s], seg[s + 1]):
                ref = x[t] @ A[s][i].T if r else np.zeros(0)
                got = tmp[t, i * max_rank: i * max_rank + r]
                assert np.array_equal(got.astype(np.float64), ref), (s, i, t, got[:8], ref[:8])
                rest = tmp[t, i * max_rank + r: (i + 1) * max_rank]
                assert np.isnan(rest).all(), ("written past the rank", s, i, t)
    assert np.isnan(tmp[:, k * max_rank:]).all()
    return NT, ng, len(log)


if __name__ == "__main__":
    cases = [
        # (seg_len, ranks per segment per slot, in, step_rank, cap, a_vec)
        ([37, 1, 33, 6, 5], [[16], [8], [13], [1], [0]], 200, None, None, True),       # NT 2, partial tiles, in % 64 = 8
        ([5], [[7]], 8, None, None, True),                                             # in = 8: one chunk, nc < ST-1
        ([64, 9], [[32], [20]], 136, None, None, True),                                # NT 4
        ([33, 40], [[64], [57]], 264, None, None, True),                               # NT 8, in % 64 = 8
        ([70, 6], [[96], [100]], 72, None, None, True),                                # NT 8, ng = 2
        ([50, 3, 77, 9], [[8, 16, 0], [32, 0, 8], [16, 16, 16], [4, 13, 2]], 128, None, None, True),  # k = 3 slots, NT 4
        ([50, 3, 77, 9], [[8, 16, 0], [32, 0, 8], [16, 16, 16], [4, 13, 2]], 128, 32, 64, True),      # cap 64, step 32
        ([100, 7, 33], [[16], [16], [8]], 520, 16, 64, True),                          # cap 64, step 16, 9 chunks (> ST)
        ([100, 7, 33], [[16], [16], [8]], 392, 16, 64, False),                         # A unaligned: scalar path
        ([12], [[64]], 1000, None, None, True),                                        # in = 1000, nc=16 > ST
        ([31, 32, 33], [[3], [17], [33]], 64, None, None, False),                      # scalar, NT 8
    ]
    for seg_len, ranks, inn, sr, cap, av in cases:
        NT, ng, nw = run_case(seg_len, ranks, inn, None, sr, cap, av)
        print(f"ok seg {seg_len} ranks {ranks} in {inn} step {sr} cap {cap} a_vec {av}: NT {NT} ng {ng} {nw} values")
