#!/usr/bin/env python3
"""Causal prefill attention in PyTorch on the GPU: the outside reference for
bench_kernels' prefill section (docs/benchmarks.md, GPU kernels > Prefill attention, 2026-11-27).

torch.nn.functional.scaled_dot_product_attention, f16, one sequence of L
tokens, `heads` query heads of head_dim 128 (K/V heads `kv`), causal, timed
with CUDA events (median of 20 after 3 warm-ups) under each SDPA backend the
build has: FLASH_ATTENTION (PyTorch's FlashAttention-2 kernels), CUDNN_ATTENTION
(cuDNN's fused attention) and EFFICIENT_ATTENTION. TFLOP/s counts
4 x head_dim x heads x sum over queries of the keys each sees, L(L+1)/2: the
convention of bench_kernels.

    python3 tests/bench/attn_ref.py [--lens 1024,2048,4096,8192,16384] [--heads 32] [--kv 32]
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def time_ms(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lens", default="1024,2048,4096,8192,16384")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv", type=int, default=32)
    ap.add_argument("--hd", type=int, default=128)
    a = ap.parse_args()
    dev = torch.device("cuda")
    print(f"== torch {torch.__version__} SDPA causal prefill, f16, heads {a.heads}/{a.kv} hd {a.hd}, "
          f"{torch.cuda.get_device_name(0)}")
    backends = [("flash (FA2)", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    for L in [int(x) for x in a.lens.split(",")]:
        q = torch.randn(1, a.heads, L, a.hd, device=dev, dtype=torch.float16)
        k = torch.randn(1, a.kv, L, a.hd, device=dev, dtype=torch.float16)
        v = torch.randn(1, a.kv, L, a.hd, device=dev, dtype=torch.float16)
        gqa = a.kv != a.heads
        flop = 4.0 * a.hd * a.heads * (L * (L + 1) / 2)
        row = [f"  L={L}:"]
        for name, be in backends:
            try:
                with sdpa_kernel([be]):
                    ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa))
                row.append(f"{name} {ms * 1e3:.1f} us {flop / (ms * 1e-3) * 1e-12:.0f} TFLOP/s")
            except Exception as e:  # a backend this build or shape lacks
                row.append(f"{name} n/a ({type(e).__name__})")
        print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main()
