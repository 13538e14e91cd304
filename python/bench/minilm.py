"""MiniLM through Python against the same compiled graph from Rust (benches/minilm.rs): one
pre-tokenised batch (`Embedder.forward`, no tokenising on either side), medians of RUNS.

    python python/bench/minilm.py MODEL_DIR --rust BENCH_BINARY [--batch 8 --seq 128 --runs 20]
"""

import argparse
import subprocess
import time

import numpy as np

import rlx


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--rust", required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    n = args.batch * args.seq
    ids = (1000 + (np.arange(n) * 7919 % 20000)).astype(np.int64).reshape(args.batch, args.seq)
    mask = np.ones_like(ids)
    emb = rlx.Embedder(args.model)
    emb.forward(ids, mask)
    rust = subprocess.run([args.rust, args.model, str(args.batch), str(args.seq), str(args.runs)], check=True, capture_output=True, text=True).stdout
    times = []
    for _ in range(args.runs):
        t = time.perf_counter()
        emb.forward(ids, mask)
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    rust_ms = float(rust.split("median ")[1].split(" ms")[0])
    py_ms = times[len(times) // 2]
    print(f"MiniLM {args.batch}x{args.seq}: Python {py_ms:.3f} ms, Rust {rust_ms:.3f} ms, ratio {py_ms / rust_ms:.3f}")


if __name__ == "__main__":
    main()
