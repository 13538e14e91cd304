#!/usr/bin/env python3
"""f32 GEMM: rlx's MatMul kernel against NumPy's sgemm (OpenBLAS) and PyTorch's `torch.mm`
(MKL on x86 wheels) in one run.

For each thread count and round, every shape runs once in rlx (the bench binary
`cargo bench -p rlx-cpu --bench gemm`, `--reps` timed calls after a warm-up) and then in
NumPy (`np.matmul` into a preallocated output, OpenBLAS pinned to the same number of
threads with threadpoolctl), alternating; after each NumPy run the script pauses (`--pause`)
so that OpenBLAS's worker threads, which spin for a while after a call, are idle again before
rlx runs on the same cores. Each side warms up for at least 0.3 s before its timed calls: a
core left idle runs the first ~100 ms of a two-thread product at about one thread's speed. Prints per shape and thread count the median over
rounds of each side's median GFLOP/s (2*M*K*N flops per call), the speed ratios
rlx / OpenBLAS and rlx / MKL (above 1: rlx is faster) and each side's share of the FMA peak, which the
bench binary measures first per thread count (`--peak`: the best of many short runs of
independent register-only FMAs on every thread, the faster of the AVX-512 and AVX2 forms).

Usage: python3 tools/bench/gemm.py [--rounds 5] [--reps 20] [--threads 1 2] [--shape M,K,N ...]
                                  [--rlx-bin PATH]
Needs numpy and threadpoolctl (e.g. /work/.anchors/venv/bin/python); torch is optional (its column
is left out, with a note, where it is missing; `--no-mkl` leaves it out too). torch runs in
this process with `torch.set_num_threads`, paused after like NumPy (its OpenMP threads spin too). `--rlx-bin` runs an
already built bench binary (on a machine without the Rust toolchain) instead of building one.
"""

import argparse
import json
import os
import statistics
import subprocess
import time

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
SHAPES = [
    (512, 512, 512),
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (128, 384, 384),
    (128, 384, 1536),
    (128, 1536, 384),
    (4096, 384, 384),
    (4096, 384, 1536),
    (4096, 1536, 384),
]


def bench_binary():
    """Builds the rlx bench binary and returns its path."""
    cmd = ["cargo", "bench", "-q", "-p", "rlx-cpu", "--bench", "gemm", "--no-run", "--message-format=json"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True).stdout
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == "gemm" and msg.get("executable"):
            return msg["executable"]
    raise RuntimeError("cargo did not report the gemm bench executable")


def rlx_gflops(exe, shape, threads, reps):
    cmd = [exe, "--threads", str(threads), "--reps", str(reps), "--shape", ",".join(map(str, shape))]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["gflops"]


def peak_gflops(exe, threads, reps=60):
    """The FMA peak at `threads` threads: the fastest form the bench binary measures."""
    cmd = [exe, "--peak", "--threads", str(threads), "--reps", str(reps)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True).stdout
    return max(json.loads(line)["gflops"] for line in out.strip().splitlines())


def median_gflops(call, shape, reps, warmup, warm_s):
    """GFLOP/s of `call` (one product of `shape`) at the median of `reps` timed calls, after at
    least `warmup` calls and `warm_s` seconds of them."""
    m, k, n = shape
    start = time.perf_counter()
    while warmup > 0 or time.perf_counter() - start < warm_s:
        call()
        warmup -= 1
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return 2 * m * k * n / statistics.median(times) / 1e9


def numpy_gflops(shape, threads, reps, warmup=3, warm_s=0.3):
    m, k, n = shape
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    c = np.empty((m, n), np.float32)
    with threadpool_limits(limits=threads, user_api="blas"):
        return median_gflops(lambda: np.matmul(a, b, out=c), shape, reps, warmup, warm_s)


def torch_gflops(torch, shape, threads, reps, warmup=3, warm_s=0.3):
    """`torch.mm` into a preallocated output at `threads` intra-op threads (MKL's sgemm)."""
    m, k, n = shape
    g = torch.Generator().manual_seed(0)
    a = torch.rand((m, k), generator=g) * 2 - 1
    b = torch.rand((k, n), generator=g) * 2 - 1
    c = torch.empty((m, n))
    torch.set_num_threads(threads)
    return median_gflops(lambda: torch.mm(a, b, out=c), shape, reps, warmup, warm_s)


def load_torch(wanted):
    """torch where it is wanted and installed, else None (and why, on stdout)."""
    if not wanted:
        return None
    try:
        import torch
    except ImportError:
        print("torch is not installed here: no MKL column")
        return None
    print("torch %s, MKL %s" % (torch.__version__, "yes" if torch.backends.mkl.is_available() else "no (another BLAS)"))
    return torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--shape", action="append", help="M,K,N (repeatable); default: the BENCHMARKS.md shapes")
    ap.add_argument("--pause", type=float, default=0.5, help="seconds to wait after each NumPy run")
    ap.add_argument("--rlx-bin", help="a built `gemm` bench binary (default: build it with cargo)")
    ap.add_argument("--no-mkl", action="store_true", help="leave out torch.mm")
    a = ap.parse_args()
    torch = load_torch(not a.no_mkl)
    shapes = [tuple(int(x) for x in s.split(",")) for s in a.shape] if a.shape else SHAPES
    exe = os.path.abspath(a.rlx_bin) if a.rlx_bin else bench_binary()
    blas = [(i["internal_api"], i["version"], i.get("architecture")) for i in threadpool_info() if i["user_api"] == "blas"]
    print("NumPy %s, BLAS %s; %d rounds x %d reps, medians" % (np.__version__, blas, a.rounds, a.reps))
    peaks = {t: peak_gflops(exe, t) for t in a.threads}
    print("FMA peak GFLOP/s: %s" % ", ".join("%d thread(s) %.1f" % (t, p) for t, p in peaks.items()))
    mkl = " MKL GFLOP/s | rlx / MKL | MKL % peak |" if torch else ""
    print("| M | K | N | threads | rlx GFLOP/s | OpenBLAS GFLOP/s | rlx / OpenBLAS |%s rlx %% peak | OpenBLAS %% peak |" % mkl)
    print("|---|---|---|---|---|---|---|%s---|---|" % ("---|---|---|" if torch else ""))
    for threads in a.threads:
        runs = {s: ([], [], []) for s in shapes}
        for _ in range(a.rounds):
            for s in shapes:
                runs[s][0].append(rlx_gflops(exe, s, threads, a.reps))
                runs[s][1].append(numpy_gflops(s, threads, a.reps))
                time.sleep(a.pause)
                if torch:
                    runs[s][2].append(torch_gflops(torch, s, threads, a.reps))
                    time.sleep(a.pause)
        for s in shapes:
            r, p = (statistics.median(x) for x in runs[s][:2])
            pk = peaks[threads] / 100
            m = ""
            if torch:
                t = statistics.median(runs[s][2])
                m = " %.1f | %.2f | %.0f |" % (t, r / t, t / pk)
            print("| %d | %d | %d | %d | %.1f | %.1f | %.2f |%s %.0f | %.0f |" % (*s, threads, r, p, r / p, m, r / pk, p / pk), flush=True)


if __name__ == "__main__":
    main()
