"""PyTorch's scaled-dot-product attention for the same work as crates/rlx-cuda/benches/attention.rs
(bench `sdpa`), per SDPA backend (cuDNN, FlashAttention-2, memory-efficient): bf16 [B, H, S, D],
causal B8 H16 S2048 D128 and non-causal B32 H12 S512 D64, the forward alone and forward +
backward. Timed as rlx's bench is (ten calls between waits, wall clock, median of nine rounds)
and with CUDA events (median of 30 single calls). Usage: python3 tools/gpu/attention.py"""
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)]


def chained(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(9):
        t = time.perf_counter()
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - t) / 10)
    rounds.sort()
    return rounds[4]


def events(fn):
    times = []
    for rep in range(35):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        if rep >= 5:
            times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]


for b, h, s, d, causal in [(8, 16, 2048, 128, True), (32, 12, 512, 64, False)]:
    q, k, v, dy = (torch.rand(b, h, s, d, device="cuda", dtype=torch.bfloat16) * 2 - 1 for _ in range(4))
    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
    flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
    shape = f"{'causal' if causal else 'full'} B{b} H{h} S{s} D{d} bf16"
    for name, backend in BACKENDS:
        with sdpa_kernel(backend):
            def forward():
                with torch.no_grad():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

            def both():
                qg.grad = kg.grad = vg.grad = None
                y = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
                y.backward(dy)

            try:
                fwd, fwd_ev, bwd, bwd_ev = chained(forward), events(forward), chained(both), events(both)
            except RuntimeError as e:
                print(f"torch attention {name:9} {shape}: not available ({str(e).splitlines()[0][:80]})")
                continue
        print(f"torch attention fwd     {shape} {name:9}: median {fwd * 1e3:.3f} ms ({fwd_ev * 1e3:.3f} by events), {flops / fwd / 1e12:.0f} TFLOP/s")
        print(f"torch attention fwd+bwd {shape} {name:9}: median {bwd * 1e3:.3f} ms ({bwd_ev * 1e3:.3f} by events), {3.5 * flops / bwd / 1e12:.0f} TFLOP/s")
print(f"(torch {torch.__version__})")
