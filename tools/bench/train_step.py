#!/usr/bin/env python3
"""Training step of the `rlx demo` character GPT: rlx against PyTorch CPU in one run.

Alternates the two (rlx: `cargo bench -p rlx-cli --bench train_step`; PyTorch:
train_step_torch.py, eager and optionally torch.compile) for `--rounds` rounds at 1 and 2
threads and prints medians and the ratio rlx / PyTorch (below 1: rlx is faster).

Usage: python3 tools/bench/train_step.py [--rounds 5] [--python PATH_TO_TORCH_PYTHON] [--compile]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")


def run(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--python", default=sys.executable, help="a Python with torch installed")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile")
    a = ap.parse_args()
    subprocess.run(["cargo", "bench", "-q", "-p", "rlx-cli", "--bench", "train_step", "--no-run"], cwd=ROOT, check=True)
    peers = ["eager"] + (["compile"] if a.compile else [])
    for threads in (1, 2):
        env = dict(os.environ, RAYON_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
        times = {"rlx": []}
        times.update({p: [] for p in peers})
        for _ in range(a.rounds):
            r = run(["cargo", "bench", "-q", "-p", "rlx-cli", "--bench", "train_step", "--", str(a.steps), "5"], env)
            times["rlx"].append(r["median_ms"])
            for p in peers:
                cmd = [a.python, os.path.join(HERE, "train_step_torch.py"), "--threads", str(threads), "--steps", str(a.steps)]
                t = run(cmd + (["--compile"] if p == "compile" else []), env)
                times[p].append(t["median_ms"])
        med = {k: statistics.median(v) for k, v in times.items()}
        line = "threads %d: rlx %.1f ms" % (threads, med["rlx"])
        for p in peers:
            line += " | torch %s %.1f ms (rlx/torch %.2f)" % (p, med[p], med["rlx"] / med[p])
        print(line + "  [medians of %d rounds of %d steps; batch 32 x 64 tokens]" % (a.rounds, a.steps), flush=True)


if __name__ == "__main__":
    main()
