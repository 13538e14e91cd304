"""Calling overhead of a tiny model's run: rlx from Python (InferenceSession and a compiled
graph) against onnxruntime's Python session and against rlx from Rust (benches/overhead.rs).

    python python/bench/overhead.py [--rust BENCH_BINARY] [--runs N]

Each figure is the median over N calls of one run on a [1, 16] float32 input (Relu then Add).
"""

import argparse
import os
import subprocess
import tempfile
import time

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

import rlx


def tiny_model() -> bytes:
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "one"], ["y"])]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
                          [numpy_helper.from_array(np.ones(16, np.float32), "one")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m.SerializeToString()


def median_ns(call, runs):
    for _ in range(runs // 10):
        call()
    times = []
    for _ in range(runs):
        t = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - t)
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rust", help="the benches/overhead.rs binary")
    ap.add_argument("--runs", type=int, default=100_000)
    args = ap.parse_args()
    model = tiny_model()
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    feed = {"x": x}

    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = 1
    ort = onnxruntime.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    mine = rlx.InferenceSession(model)
    np.testing.assert_allclose(mine.run(None, feed)[0], ort.run(None, feed)[0])

    g = rlx.Graph()
    xv = g.input("x", [1, 16])
    g.outputs(g.relu(xv) + 1.0)
    compiled = rlx.compile(g)
    native = compiled._c

    rows = [
        ("onnxruntime InferenceSession.run", median_ns(lambda: ort.run(None, feed), args.runs)),
        ("rlx InferenceSession.run", median_ns(lambda: mine.run(None, feed), args.runs)),
        ("rlx compiled(x=...)", median_ns(lambda: compiled(x=x), args.runs)),
        ("rlx native Compiled.run(dict)", median_ns(lambda: native.run(feed), args.runs)),
    ]
    if args.rust:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tiny.onnx")
            with open(path, "wb") as f:
                f.write(model)
            out = subprocess.run([args.rust, path, "x", "1,16", str(args.runs)], check=True, capture_output=True, text=True).stdout
            rows.append(("rlx from Rust (CompiledGraph::run)", int(out.split("median ")[1].split(" ns")[0])))
    for name, ns in rows:
        print(f"{name:40s} {ns / 1000:8.2f} µs")


if __name__ == "__main__":
    main()
