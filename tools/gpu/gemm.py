"""PyTorch's GEMM for the same shapes as crates/rlx-cuda/benches/gemm.rs: CUDA-event timing,
median of 25 runs after 5 warm-ups. Usage: python3 tools/gpu/gemm.py [M N K] [bf16|f16|f32]."""
import sys
import time

import torch

args = sys.argv[1:]
m, n, k = (int(a) for a in (args[:3] if len(args) >= 3 else ["8192"] * 3))
dtype = {"f32": torch.float32, "f16": torch.float16}.get(args[3] if len(args) > 3 else "bf16", torch.bfloat16)
a = torch.rand(m, k, device="cuda", dtype=dtype) - 0.5
b = torch.rand(k, n, device="cuda", dtype=dtype) - 0.5
times = []
for rep in range(30):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.matmul(a, b)
    end.record()
    torch.cuda.synchronize()
    if rep >= 5:
        times.append(start.elapsed_time(end))
times.sort()
ms = times[len(times) // 2]
print(f"torch matmul {str(dtype).split('.')[-1]} {m}x{n}x{k}: median {ms:.3f} ms, {2 * m * n * k / ms / 1e9:.0f} TFLOP/s (torch {torch.__version__})")

# The same work as rlx's bench: ten chained products x <- x @ w per round trip, three between
# waits, wall-clock over thirty products, median of seven rounds.
if m == n == k:

    def chain():
        y = a
        for _ in range(10):
            y = y @ b
        return y

    for _ in range(2):
        chain()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(3):
            chain()
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - t) / 30)
    rounds.sort()
    s = rounds[3]
    print(f"torch matmul {str(dtype).split('.')[-1]} {m}x{n}x{k} chained: median {s * 1e3:.3f} ms, {2 * m * n * k / s / 1e12:.0f} TFLOP/s")
