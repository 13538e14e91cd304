"""Small ONNX models built with the `onnx` package, random weights: a ResNet-style CNN, a
BERT-style encoder layer and a ViT-style patch encoder, each with a symbolic batch dim."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class Builder:
    def __init__(self, rng):
        self.rng = rng
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, p="t"):
        self.n += 1
        return f"{p}{self.n}"

    def weight(self, *shape, scale=None, dtype=np.float32):
        scale = scale if scale is not None else 1.0 / np.sqrt(max(1, np.prod(shape[1:]) if len(shape) > 1 else shape[0]))
        a = (self.rng.standard_normal(shape) * scale).astype(dtype)
        return self.const(a)

    def const(self, a):
        n = self.name("w")
        self.inits.append(numpy_helper.from_array(np.asarray(a), n))
        return n

    def op(self, kind, *inputs, outputs=1, **attrs):
        outs = [self.name() for _ in range(outputs)]
        self.nodes.append(helper.make_node(kind, list(inputs), outs, **attrs))
        return outs[0] if outputs == 1 else outs

    def model(self, inputs, outputs):
        g = helper.make_graph(self.nodes, "g", inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m.SerializeToString()


def resnet(rng):
    b = Builder(rng)

    def bn(x, c):
        return b.op("BatchNormalization", x, b.const(rng.uniform(0.5, 1.5, c).astype(np.float32)),
                    b.const(rng.normal(0, 0.1, c).astype(np.float32)), b.const(rng.normal(0, 0.1, c).astype(np.float32)),
                    b.const(rng.uniform(0.5, 1.5, c).astype(np.float32)), epsilon=1e-5)

    def conv(x, cin, cout, k, s):
        return b.op("Conv", x, b.weight(cout, cin, k, k), kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4)

    x = b.op("Relu", bn(conv("image", 3, 16, 7, 2), 16))
    x = b.op("MaxPool", x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    for cin, cout, s in [(16, 16, 1), (16, 32, 2)]:
        y = b.op("Relu", bn(conv(x, cin, cout, 3, s), cout))
        y = bn(conv(y, cout, cout, 3, 1), cout)
        short = x if (cin, s) == (cout, 1) else bn(conv(x, cin, cout, 1, s), cout)
        x = b.op("Relu", b.op("Add", y, short))
    x = b.op("Flatten", b.op("GlobalAveragePool", x))
    logits = b.op("Gemm", x, b.weight(10, 32), b.weight(10, scale=0.1), transB=1)
    b.nodes[-1].output[0] = "logits"
    return b.model([helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, 32, 32])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])])


def _encoder_layer(b, x, seq, d, heads, mask=None):
    """Post-norm transformer layer over x [N, seq, d] (BERT's layout)."""
    hd = d // heads

    def dense(v, i, o):
        return b.op("Add", b.op("MatMul", v, b.weight(i, o)), b.weight(o, scale=0.1))

    def split(v):
        return b.op("Transpose", b.op("Reshape", v, b.const(np.array([0, seq, heads, hd], np.int64))), perm=[0, 2, 1, 3])

    q, k, v = (split(dense(x, d, d)) for _ in range(3))
    s = b.op("Div", b.op("MatMul", q, b.op("Transpose", k, perm=[0, 1, 3, 2])), b.const(np.float32(np.sqrt(hd))))
    if mask is not None:
        s = b.op("Add", s, mask)
    a = b.op("MatMul", b.op("Softmax", s, axis=-1), v)
    a = b.op("Reshape", b.op("Transpose", a, perm=[0, 2, 1, 3]), b.const(np.array([0, seq, d], np.int64)))

    def ln(v):
        return b.op("LayerNormalization", v, b.const(np.float32(1 + 0.1 * b.rng.standard_normal(d))),
                    b.const(np.float32(0.1 * b.rng.standard_normal(d))), axis=-1, epsilon=1e-12)

    x = ln(b.op("Add", x, dense(a, d, d)))
    h = dense(x, d, 4 * d)
    gelu = b.op("Mul", b.op("Mul", h, b.const(np.float32(0.5))),
                b.op("Add", b.op("Erf", b.op("Div", h, b.const(np.float32(np.sqrt(2))))), b.const(np.float32(1))))
    return ln(b.op("Add", x, dense(gelu, 4 * d, d)))


def bert(rng, vocab=100, seq=16, d=32, heads=4):
    b = Builder(rng)
    words = b.op("Gather", b.weight(vocab, d, scale=0.5), "input_ids", axis=0)
    x = b.op("Add", words, b.weight(seq, d, scale=0.5))
    m = b.op("Cast", "attention_mask", to=TensorProto.FLOAT)
    m = b.op("Unsqueeze", m, b.const(np.array([1, 2], np.int64)))
    m = b.op("Mul", b.op("Sub", b.const(np.float32(1)), m), b.const(np.float32(-1e4)))
    for _ in range(2):
        x = _encoder_layer(b, x, seq, d, heads, m)
    pooled = b.op("Tanh", b.op("Gemm", b.op("Flatten", b.op("Gather", x, b.const(np.array([0], np.int64)), axis=1)),
                               b.weight(d, d), b.weight(d, scale=0.1)))
    b.nodes[-1].output[0] = "pooler_output"
    b.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))
    ids = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", seq]) for n in ("input_ids", "attention_mask")]
    return b.model(ids, [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", seq, d]),
                         helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, ["batch", d])])


def vit(rng, image=16, patch=4, d=32, heads=4):
    b = Builder(rng)
    n = (image // patch) ** 2
    x = b.op("Conv", "pixel_values", b.weight(d, 3, patch, patch), b.weight(d, scale=0.1), kernel_shape=[patch, patch], strides=[patch, patch])
    x = b.op("Transpose", b.op("Reshape", x, b.const(np.array([0, d, n], np.int64))), perm=[0, 2, 1])
    cls = b.op("Expand", b.weight(1, 1, d), b.op("Concat", b.op("Slice", b.op("Shape", x), b.const(np.array([0], np.int64)), b.const(np.array([1], np.int64))),
                                                 b.const(np.array([1, d], np.int64)), axis=0))
    x = b.op("Add", b.op("Concat", cls, x, axis=1), b.weight(1, n + 1, d, scale=0.5))
    x = _encoder_layer(b, x, n + 1, d, heads)
    b.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))
    return b.model([helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["batch", 3, image, image])],
                   [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", n + 1, d])])
