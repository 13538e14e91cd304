#!/usr/bin/env python3
"""ResNet-18 forward at 1×3×224×224: rlx (`rlx onnx-run --bench`) against onnxruntime on the same
ONNX file, and PyTorch eager on the module it was exported from, at 1 and 2 threads.

The network is torchvision's ResNet-18 layout written out here (torchvision is not needed):
7×7/2 stem, max-pool, four stages of two basic blocks (64/128/256/512 channels, 1×1 projection
shortcuts where the shape changes), global average pool, a 1000-way linear layer. Weights and
batch-norm statistics are random (seed 0); the export is eval-mode, opset 17, and the
exporter folds each batch norm into its conv, so the graph holds Conv (with bias), Relu and
Add only.

Before timing, rlx's output on one random image is checked against onnxruntime's (max abs
error relative to the largest |logit|). Rounds alternate the peers so each sees the same load;
each round takes the median of `--reps` forwards, and the table shows the median over rounds.

Usage: python3 tools/bench/resnet.py [--rounds 5] [--reps 10] [--threads 1,2] [--rlx-bin PATH] [--pause 1.0]
  (needs torch, onnx, onnxruntime; the export goes to target/bench-resnet/).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
OUT = os.path.join(ROOT, "target", "bench-resnet")
SHAPE = (1, 3, 224, 224)


def resnet18():
    import torch
    from torch import nn

    def bn(c):
        b = nn.BatchNorm2d(c)
        with torch.no_grad():
            b.weight.uniform_(0.5, 1.5)
            b.bias.uniform_(-0.2, 0.2)
            b.running_mean.uniform_(-0.2, 0.2)
            b.running_var.uniform_(0.5, 1.5)
        return b

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = bn(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = bn(cout)
            self.short = None
            if stride != 1 or cin != cout:
                self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), bn(cout))

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (x if self.short is None else self.short(x)))

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), bn(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
            blocks, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                blocks += [Block(cin, cout, stride), Block(cout, cout, 1)]
                cin = cout
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(512, 1000)

        def forward(self, x):
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))

    torch.manual_seed(0)
    return ResNet18().eval()


def export():
    import torch
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "resnet18.onnx")
    model = resnet18()
    if not os.path.exists(path):
        torch.onnx.export(model, (torch.randn(*SHAPE),), path, opset_version=17, dynamo=False,
                          input_names=["image"], output_names=["logits"])
    return model, path


def ort_session(path, threads):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def check(rlx, path):
    """rlx's logits against onnxruntime's on one random image: max abs error / max |logit|."""
    import numpy as np
    x = np.random.default_rng(7).standard_normal(SHAPE).astype(np.float32)
    want = ort_session(path, 2).run(None, {"image": x})[0]
    with tempfile.TemporaryDirectory() as d:
        np.save(os.path.join(d, "input_0.npy"), x)
        with open(os.path.join(d, "manifest.json"), "w") as f:
            json.dump({"inputs": [{"name": "image", "kind": "tensor", "onnx_dtype": "FLOAT",
                                   "file": "input_0.npy"}]}, f)
        os.makedirs(os.path.join(d, "out"))
        subprocess.run([rlx, "onnx-run", path, "--inputs", d, "--out", os.path.join(d, "out")], check=True)
        got = np.load(os.path.join(d, "out", "output_0.npy"))
    return float(np.abs(got - want).max() / np.abs(want).max())


def median_ms(f, reps):
    for _ in range(2):
        f()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def rlx_ms(rlx, path, threads, reps):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    out = subprocess.run([rlx, "onnx-run", path, "--bench", "--runs", str(reps)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return float(re.search(r"median ([0-9.]+) ms", out).group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rlx-bin", default=os.path.join(ROOT, "target", "release", "rlx"))
    ap.add_argument("--pause", type=float, default=1.0, help="seconds of idle before each peer's timing")
    a = ap.parse_args()
    import numpy as np
    import torch
    if a.rlx_bin == os.path.join(ROOT, "target", "release", "rlx"):
        subprocess.run(["cargo", "build", "-q", "--release", "-p", "rlx-cli", "--bin", "rlx"], cwd=ROOT, check=True)
    model, path = export()
    print(f"rlx vs onnxruntime, max abs error / max |logit|: {check(a.rlx_bin, path):.2e}", flush=True)
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    tx = torch.from_numpy(x)
    torch.set_grad_enabled(False)
    print(f"ms, median over {a.rounds} rounds of medians of {a.reps}; ratio = rlx time / peer time "
          f"(below 1: rlx is faster)")
    for threads in map(int, a.threads.split(",")):
        torch.set_num_threads(threads)
        sess = ort_session(path, threads)
        times = {"rlx": [], "ort": [], "eager": []}
        for _ in range(a.rounds):
            # Each peer starts after a pause: torch's and onnxruntime's worker threads spin for a
            # while after their last job and would otherwise share the cores with the next peer.
            time.sleep(a.pause)
            times["rlx"].append(rlx_ms(a.rlx_bin, path, threads, a.reps))
            time.sleep(a.pause)
            times["ort"].append(median_ms(lambda: sess.run(None, {"image": x}), a.reps))
            time.sleep(a.pause)
            times["eager"].append(median_ms(lambda: model(tx), a.reps))
        med = {p: statistics.median(t) for p, t in times.items()}
        print(f"threads {threads}: rlx {med['rlx']:.1f}  ort {med['ort']:.1f}  eager {med['eager']:.1f}  |  "
              f"rlx/ort {med['rlx'] / med['ort']:.2f}  rlx/eager {med['rlx'] / med['eager']:.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
