"""`InferenceSession`: onnxruntime's session API over an ONNX model imported and compiled by
rlx, so that code written for onnxruntime runs unchanged with `import rlx as ort`."""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from . import _rlx

_PROVIDERS = {"CPUExecutionProvider": "cpu", "CUDAExecutionProvider": "cuda", "TensorrtExecutionProvider": "cuda"}


class NodeArg:
    """An input or output as onnxruntime describes it: name, shape (ints, symbol names) and
    type (`tensor(float)`, ...)."""

    def __init__(self, name: str, type: str, shape: list | None):
        self.name = name
        self.type = type
        self.shape = shape

    def __repr__(self) -> str:
        return f"NodeArg(name='{self.name}', type='{self.type}', shape={self.shape})"


def _device(providers: Sequence[Any] | None, device: str | None) -> str:
    if device is not None:
        return device
    for p in providers or ():
        name, options = (p if isinstance(p, tuple) else (p, {}))
        if name in _PROVIDERS:
            kind = _PROVIDERS[name]
            return f"cuda:{int(options.get('device_id', 0))}" if kind == "cuda" else kind
    return "cpu"


def get_available_providers() -> list[str]:
    """What rlx can run ONNX models on (the CPU always; CUDA where this build has it)."""
    return ["CUDAExecutionProvider", "CPUExecutionProvider"]


class InferenceSession:
    """An ONNX model compiled by rlx, with onnxruntime's `InferenceSession` API.

    `path_or_bytes`: a file path or the serialized model. `providers` picks the device as
    onnxruntime's names do (CPUExecutionProvider, CUDAExecutionProvider with `device_id`), or
    pass `device="cpu" | "cuda:N" | "wgpu:N"`. `sess_options` and other onnxruntime arguments
    are accepted and ignored.
    """

    def __init__(self, path_or_bytes: str | bytes | os.PathLike, sess_options: Any = None,
                 providers: Sequence[Any] | None = None, provider_options: Any = None, *,
                 device: str | None = None, **kwargs: Any):
        if isinstance(path_or_bytes, os.PathLike):
            path_or_bytes = os.fspath(path_or_bytes)
        self._device = _device(providers, device)
        self._s = _rlx.OnnxSession(path_or_bytes, self._device)
        self._outputs = [NodeArg(*o) for o in self._s.outputs()]
        self._index = {o.name: i for i, o in enumerate(self._outputs)}

    def get_inputs(self) -> list[NodeArg]:
        return [NodeArg(*i) for i in self._s.inputs()]

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_providers(self) -> list[str]:
        return ["CUDAExecutionProvider" if self._device.startswith("cuda") else "CPUExecutionProvider"]

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any], run_options: Any = None) -> list:
        """The outputs named (all when `output_names` is None or empty), as NumPy arrays."""
        out = self._s.run(input_feed if isinstance(input_feed, dict) else dict(input_feed))
        if not output_names:
            return out
        try:
            return [out[self._index[n]] for n in output_names]
        except KeyError as e:
            raise _rlx.RlxError(f"no output named {e.args[0]!r}; the model's outputs are {list(self._index)}") from None
