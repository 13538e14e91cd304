"""The graph builder: `Graph` with ops as methods and `Value`s with arithmetic operators,
over the native graph (ops are appended in rlx's text format, so every op kind is reachable
through `Graph.op`)."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from . import _rlx

_ACTIVATIONS = (
    "Gelu GeluApprox Silu Relu Sigmoid Tanh Exp Log Sqrt Rsqrt Neg Abs Sin Cos Tan Atan Recip "
    "Round Floor Ceil Sign Softplus Elu Erf HardSwish HardSigmoid Mish Softsign LogSigmoid"
).split()


def _snake(name: str) -> str:
    out = ""
    for i, c in enumerate(name):
        if c.isupper() and i > 0:
            out += "_"
        out += c.lower()
    return out


def _ron(v: Any) -> str:
    """A Python attribute value in RON (the text format's attribute syntax)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_ron(x) for x in v) + "]"
    if isinstance(v, str):
        return '"' + v + '"'
    if isinstance(v, float):
        return repr(v)
    return str(v)


class Value:
    """One value of a `Graph`: arithmetic operators and `@` append ops to its graph."""

    __slots__ = ("graph", "handle")

    def __init__(self, graph: "Graph", handle: tuple[int, int]):
        self.graph = graph
        self.handle = handle

    @property
    def dtype(self) -> str:
        return self.graph._g.value_type(self.handle)[0]

    @property
    def shape(self) -> list:
        return self.graph._g.value_type(self.handle)[1]

    def __repr__(self) -> str:
        dtype, shape = self.graph._g.value_type(self.handle)
        return f"Value(%{self.handle[0]}.{self.handle[1]}: {dtype}{shape})"

    def _other(self, x: Any) -> "Value":
        if isinstance(x, Value):
            return x
        return self.graph.constant(np.asarray(x, dtype=self.dtype))

    def __add__(self, x): return self.graph.add(self, self._other(x))
    def __radd__(self, x): return self.graph.add(self._other(x), self)
    def __sub__(self, x): return self.graph.sub(self, self._other(x))
    def __rsub__(self, x): return self.graph.sub(self._other(x), self)
    def __mul__(self, x): return self.graph.mul(self, self._other(x))
    def __rmul__(self, x): return self.graph.mul(self._other(x), self)
    def __truediv__(self, x): return self.graph.div(self, self._other(x))
    def __rtruediv__(self, x): return self.graph.div(self._other(x), self)
    def __pow__(self, x): return self.graph.pow(self, self._other(x))
    def __matmul__(self, x): return self.graph.matmul(self, x)
    def __neg__(self): return self.graph.neg(self)


class Graph:
    """A tensor graph under construction, mirroring rlx's Rust builder.

    >>> g = rlx.Graph()
    >>> x = g.input("x", ["B", 3])
    >>> g.outputs(g.relu(x) * 2.0)
    """

    def __init__(self, native: "_rlx.Graph | None" = None):
        self._g = native if native is not None else _rlx.Graph()

    @staticmethod
    def parse(text: str) -> "Graph":
        """A graph from rlx's text format (what `str(graph)` prints)."""
        return Graph(_rlx.Graph.parse(text))

    def __str__(self) -> str:
        return str(self._g)

    def __len__(self) -> int:
        return len(self._g)

    def _v(self, h) -> Value:
        return Value(self, h)

    def input(self, name: str, shape: Sequence[int | str], dtype: Any = "float32") -> Value:
        """A runtime input; dims are sizes or symbol names (one compiled graph serves every size)."""
        return self._v(self._g.input(name, list(shape), dtype))

    def param(self, name: str, shape: Sequence[int], dtype: Any = "float32") -> Value:
        """A parameter: a weight set on the compiled graph with `set_param`."""
        return self._v(self._g.param(name, list(shape), dtype))

    def constant(self, array: Any, dtype: Any = None) -> Value:
        return self._v(self._g.constant(array, dtype))

    def op(self, op: str, *inputs: Value) -> Value | list[Value]:
        """Appends any op written as the text format writes it, e.g. `"Softmax(axis:-1)"`;
        one output is returned as a Value, several as a list."""
        outs = self._g.op(op, [self._check(x).handle for x in inputs])
        vals = [self._v(h) for h in outs]
        return vals[0] if len(vals) == 1 else vals

    def _check(self, x: Value) -> Value:
        if not isinstance(x, Value) or x.graph is not self:
            raise _rlx.RlxError(f"{x!r} is not a value of this graph")
        return x

    def outputs(self, *values: Value) -> list[Value]:
        """Sets the graph's outputs (when given) and returns them."""
        if values:
            self._g.set_outputs([self._check(v).handle for v in values])
        return [self._v(h) for h in self._g.outputs()]

    def inputs(self) -> dict[str, Value]:
        return {n: self._v(h) for n, h in self._g.inputs()}

    def params(self) -> dict[str, Value]:
        return {n: self._v(h) for n, h in self._g.params()}

    # Elementwise.
    def activation(self, kind: str, x: Value) -> Value:
        return self.op(f"Activation(kind:{kind})", x)

    def binary(self, op: str, a: Value, b: Value) -> Value:
        return self.op(f"Binary(op:{op})", a, b)

    def add(self, a, b): return self.binary("Add", a, b)
    def sub(self, a, b): return self.binary("Sub", a, b)
    def mul(self, a, b): return self.binary("Mul", a, b)
    def div(self, a, b): return self.binary("Div", a, b)
    def maximum(self, a, b): return self.binary("Max", a, b)
    def minimum(self, a, b): return self.binary("Min", a, b)
    def pow(self, a, b): return self.binary("Pow", a, b)

    def compare(self, op: str, a: Value, b: Value) -> Value:
        """`op`: Eq, Ne, Lt, Le, Gt, Ge; a bool result."""
        return self.op(f"Compare(op:{op})", a, b)

    def where(self, cond: Value, a: Value, b: Value) -> Value:
        return self.op("Where()", cond, a, b)

    def cast(self, x: Value, dtype: str) -> Value:
        from ._dtype import rlx_name
        name = rlx_name(dtype)
        return self.op(f"Cast(to:{'Bool' if name == 'bool' else name.upper()})", x)

    # Products, reductions, rows.
    def matmul(self, a: Value, b: Value) -> Value:
        return self.op("MatMul()", a, b)

    def reduce(self, op: str, x: Value, axes: Iterable[int], keep_dim: bool = False) -> Value:
        """`op`: Sum, Mean, Max, Min, Prod."""
        return self.op(f"Reduce(op:{op},axes:{_ron(list(axes))},keep_dim:{_ron(keep_dim)})", x)

    def sum(self, x, axes=None, keep_dim=False):
        return self.reduce("Sum", x, range(len(x.shape)) if axes is None else axes, keep_dim)

    def mean(self, x, axes=None, keep_dim=False):
        return self.reduce("Mean", x, range(len(x.shape)) if axes is None else axes, keep_dim)

    def softmax(self, x: Value, axis: int = -1) -> Value:
        return self.op(f"Softmax(axis:{axis})", x)

    def layer_norm(self, x: Value, gamma: Value, beta: Value, axis: int = -1, eps: float = 1e-5) -> Value:
        return self.op(f"LayerNorm(axis:{axis},eps:{float(eps)!r})", x, gamma, beta)

    def softmax_cross_entropy(self, logits: Value, targets: Value) -> Value:
        """Per-row cross-entropy of `logits` [.., C] against probability rows `targets` [.., C]."""
        return self.op("SoftmaxCrossEntropy()", logits, targets)

    # Shapes.
    def reshape(self, x: Value, shape: Sequence[int | str]) -> Value:
        return self.op(f"Reshape(new_shape:{_ron(list(shape))})", x)

    def transpose(self, x: Value, perm: Sequence[int]) -> Value:
        return self.op(f"Transpose(perm:{_ron(list(perm))})", x)

    def concat(self, xs: Sequence[Value], axis: int) -> Value:
        return self.op(f"Concat(axis:{axis})", *xs)

    def narrow(self, x: Value, axis: int, start: int, length: int) -> Value:
        return self.op(f"Narrow(axis:{axis},start:{start},len:{length})", x)

    def gather(self, table: Value, indices: Value, axis: int = 0) -> Value:
        return self.op(f"Gather(axis:{axis})", table, indices)


def _activation_method(kind: str):
    def method(self: Graph, x: Value) -> Value:
        return self.activation(kind, x)

    method.__name__ = _snake(kind)
    method.__doc__ = f"Elementwise {kind}."
    return method


for _kind in _ACTIVATIONS:
    setattr(Graph, _snake(_kind), _activation_method(_kind))


class Compiled:
    """A graph compiled for a device: call it with arrays by input name; it returns the
    outputs as NumPy arrays (one array for a single output)."""

    def __init__(self, native: "_rlx.Compiled"):
        self._c = native

    def __call__(self, **inputs: Any):
        out = self._c.run(inputs)
        return out[0] if len(out) == 1 else out

    def run(self, inputs: Mapping[str, Any]) -> list[np.ndarray]:
        return self._c.run(dict(inputs))

    def set_param(self, name: str, value: Any) -> None:
        self._c.set_param(name, value)

    def param(self, name: str) -> np.ndarray:
        return self._c.param(name)

    def inputs(self) -> list[tuple[str, str, list]]:
        return self._c.inputs()

    def params(self) -> list[tuple[str, str, list]]:
        return self._c.params()

    def report(self) -> str:
        """How each op kind was handled for the device (native, decomposed, on the host)."""
        return self._c.report()


def compile(graph: Graph, device: str = "cpu", *, fuse: bool = True, optimize: bool = True) -> Compiled:
    """Compiles `graph` for `device` ("cpu", "cuda:N", "wgpu:N"); the GIL is released meanwhile."""
    return Compiled(_rlx.compile(graph._g, device, fuse, optimize))


def grad(graph: Graph, wrt: Sequence[str], loss: Value | None = None) -> Graph:
    """A graph computing `graph`'s outputs, then d`loss`/d`name` for each name in `wrt`
    (inputs or parameters). `loss` defaults to the first output; a non-scalar loss is summed."""
    return Graph(_rlx.grad(graph._g, list(wrt), None if loss is None else graph._check(loss).handle))


def jvp(graph: Graph, wrt: Sequence[str]) -> Graph:
    """A graph computing `graph`'s outputs, then their tangents along new inputs
    `tangent.<name>` (one per name in `wrt`, of that value's type)."""
    return Graph(_rlx.jvp(graph._g, list(wrt)))


def vmap(graph: Graph, batched: Mapping[str, int], size: int | str) -> Graph:
    """`graph` mapped over a new batch axis of `size` (a size or symbol name): each input or
    parameter in `batched` carries it at the given axis; outputs carry it first."""
    return Graph(_rlx.vmap(graph._g, list(batched.items()), size))
