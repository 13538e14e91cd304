#!/usr/bin/env python3
"""Small ONNX models with inputs and onnxruntime's outputs, for rlx-io's import tests.

Writes crates/rlx-io/tests/data/onnx/<name>/{model.onnx, input_<J>.pb, output_<J>.pb}
(TensorProto files, the ONNX backend-test layout). Inputs are seeded random normals.

    /work/.anchors/venv/bin/python tools/onnx/make_fixtures.py   # onnx 1.23.2, onnxruntime 1.32
"""

import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "crates", "rlx-io", "tests", "data", "onnx")
rng = np.random.default_rng(7)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def save(name, nodes, inputs, outputs, inits, feeds, opset=17):
    graph = helper.make_graph(nodes, name, inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    results = sess.run(None, feeds)
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    for j, (k, v) in enumerate(feeds.items()):
        with open(os.path.join(d, f"input_{j}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, k).SerializeToString())
    for j, v in enumerate(results):
        with open(os.path.join(d, f"output_{j}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, f"out{j}").SerializeToString())


def vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


# An MLP head: Gemm (transB) → Relu → MatMul → LayerNormalization → Softmax, batch symbolic.
save(
    "mlp",
    [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["m"]),
        helper.make_node("LayerNormalization", ["m", "g", "b"], ["n"], axis=-1, epsilon=1e-5),
        helper.make_node("Softmax", ["n"], ["y"], axis=-1),
    ],
    [vi("x", ["batch", 6])],
    [vi("y", ["batch", 5])],
    {"w1": f32(8, 6), "b1": f32(8), "w2": f32(8, 5), "g": f32(5), "b": f32(5)},
    {"x": f32(3, 6)},
)

# A small CNN: Conv (SAME_UPPER, stride 2) → BatchNormalization → Relu → MaxPool (pads) →
# AveragePool (ceil_mode) → Flatten → Gemm.
save(
    "cnn",
    [
        helper.make_node("Conv", ["x", "w", "wb"], ["c"], auto_pad="SAME_UPPER", strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c", "s", "bb", "mean", "var"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("AveragePool", ["p"], ["a"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
        helper.make_node("Flatten", ["a"], ["f"]),
        helper.make_node("Gemm", ["f", "fw"], ["y"]),
    ],
    [vi("x", [2, 3, 9, 9])],
    [vi("y", [2, 4])],
    {
        "w": f32(4, 3, 3, 3), "wb": f32(4), "s": f32(4), "bb": f32(4), "mean": f32(4),
        "var": np.abs(f32(4)) + 0.5, "fw": f32(36, 4),
    },
    {"x": f32(2, 3, 9, 9)},
)

# Shape arithmetic folded at import: Shape → Gather → Concat feeding Reshape, then Transpose,
# Slice (negative step) and ReduceSum over an axes input.
save(
    "reshape_chain",
    [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
        helper.make_node("Concat", ["n", "tail"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1]),
        helper.make_node("Slice", ["t", "st", "en", "ax", "sp"], ["sl"]),
        helper.make_node("ReduceSum", ["sl", "rax"], ["y"], keepdims=0),
    ],
    [vi("x", [2, 4, 6])],
    [vi("y", [2, 4])],
    {
        "i0": np.array([0], np.int64), "tail": np.array([8, 3], np.int64),
        "st": np.array([-1], np.int64), "en": np.array([-9], np.int64), "ax": np.array([2], np.int64),
        "sp": np.array([-2], np.int64), "rax": np.array([1], np.int64),
    },
    {"x": f32(2, 4, 6)},
)
# Control flow on run-time values: an If on a data-dependent condition whose branches read x
# from the outer graph; a Loop with a fixed trip count carrying a state and stacking a scan
# output, its body gathering row i of the outer x; a Scan over axis 1 of the If's result,
# reversed, its output stacked on axis 1, its body reading the outer scalar s.
def graph(name, nodes, inputs, outputs):
    return helper.make_graph(nodes, name, inputs, outputs)


then_g = graph("then", [helper.make_node("Mul", ["x", "two"], ["t"])], [], [vi("t", [4, 3])])
else_g = graph("else", [helper.make_node("Sub", ["x", "two"], ["e"])], [], [vi("e", [4, 3])])
loop_body = graph(
    "loop_body",
    [
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
        helper.make_node("Mul", ["v", "half"], ["hv"]),
        helper.make_node("Add", ["hv", "row"], ["v_out"]),
        helper.make_node("Tanh", ["v_out"], ["step"]),
    ],
    [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), vi("v", [3])],
    [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), vi("v_out", [3]), vi("step", [3])],
)
scan_body = graph(
    "scan_body",
    [
        helper.make_node("Mul", ["col", "s"], ["cs"]),
        helper.make_node("Add", ["h", "cs"], ["hc"]),
        helper.make_node("Tanh", ["hc"], ["h_out"]),
        helper.make_node("Mul", ["h_out", "two"], ["out"]),
    ],
    [vi("h", [4]), vi("col", [4])],
    [vi("h_out", [4]), vi("out", [4])],
)
save(
    "control",
    [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y_if"], then_branch=then_g, else_branch=else_g),
        helper.make_node("ReduceMean", ["x"], ["v0"], axes=[0], keepdims=0),
        helper.make_node("Loop", ["trips", "", "v0"], ["v_final", "steps"], body=loop_body),
        helper.make_node("ReduceMax", ["x"], ["h0"], axes=[1], keepdims=0),
        helper.make_node("Scan", ["h0", "y_if"], ["h_final", "cols"], body=scan_body, num_scan_inputs=1,
                         scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[1]),
    ],
    [vi("x", [4, 3])],
    [vi("y_if", [4, 3]), vi("v_final", [3]), vi("steps", [4, 3]), vi("h_final", [4]), vi("cols", [4, 3])],
    {"two": np.array(2, np.float32), "half": np.array(0.5, np.float32), "zero": np.array(0, np.float32),
     "trips": np.array(4, np.int64)},
    {"x": f32(4, 3)},
)
# Sequence ops the node tests leave out: SplitToSequence into columns, SequenceErase at a
# negative position, ConcatFromSequence along an axis and stacked on a new one.
save(
    "sequences",
    [
        helper.make_node("SplitToSequence", ["x"], ["cols"], axis=1),
        helper.make_node("SequenceErase", ["cols", "pos"], ["kept"]),
        helper.make_node("ConcatFromSequence", ["kept"], ["joined"], axis=0),
        helper.make_node("ConcatFromSequence", ["kept"], ["stacked"], axis=-1, new_axis=1),
    ],
    [vi("x", [2, 3])],
    [vi("joined", [4, 1]), vi("stacked", [2, 1, 2])],
    {"pos": np.array(-2, np.int64)},
    {"x": f32(2, 3)},
)
print("wrote", os.path.normpath(OUT))
