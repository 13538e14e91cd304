"""MiniLM through Python against the same compiled graph from Rust (benches/minilm.rs): one
pre-tokenised batch (`Embedder.forward`, no tokenising on either side).

    python python/bench/minilm.py MODEL_DIR --rust BENCH_BINARY [--batch 8 --seq 128 --runs 4 --rounds 5]

Each round times RUNS runs from Rust, then RUNS from Python; a round's ratio is the two
medians', so load that drifts between rounds (a shared machine) weighs on both sides alike.
Prints the median over rounds of each side's median and of the ratio, and each side's fastest
run (the one load disturbed least).
"""

import argparse
import statistics
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
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    n = args.batch * args.seq
    ids = (1000 + (np.arange(n) * 7919 % 20000)).astype(np.int64).reshape(args.batch, args.seq)
    mask = np.ones_like(ids)
    emb = rlx.Embedder(args.model)
    emb.forward(ids, mask)
    rust_ms, py_ms, ratios, rust_min, py_min = [], [], [], [], []
    for _ in range(args.rounds):
        out = subprocess.run([args.rust, args.model, str(args.batch), str(args.seq), str(args.runs)], check=True, capture_output=True, text=True).stdout
        rust_ms.append(float(out.split("median ")[1].split(" ms")[0]))
        rust_min.append(float(out.split("min ")[1].split(" ms")[0]))
        times = []
        for _ in range(args.runs):
            t = time.perf_counter()
            emb.forward(ids, mask)
            times.append((time.perf_counter() - t) * 1e3)
        py_ms.append(sorted(times)[len(times) // 2])  # the upper median, as the Rust side's
        py_min.append(min(times))
        ratios.append(py_ms[-1] / rust_ms[-1])
    med = statistics.median
    print(f"MiniLM {args.batch}x{args.seq}: Python {med(py_ms):.3f} ms, Rust {med(rust_ms):.3f} ms, ratio {med(ratios):.3f} "
          f"(rounds: {', '.join(f'{r:.3f}' for r in ratios)}); fastest: Python {min(py_min):.3f} ms, Rust {min(rust_min):.3f} ms, "
          f"ratio {min(py_min) / min(rust_min):.3f}")


if __name__ == "__main__":
    main()
