"""rlx from Python: run ONNX models with onnxruntime's API, build and compile tensor graphs,
differentiate and train them, embed sentences and generate text; NumPy arrays in and out."""

try:
    import ml_dtypes as _ml_dtypes  # noqa: F401  (registers bfloat16 with NumPy when present)
except ImportError:
    pass

from ._rlx import (
    DTypeError,
    FileError,
    RlxError,
    ShapeError,
    UnsupportedError,
    __version__,
)
from ._graph import Compiled, Graph, Value, compile, grad, jvp, vmap
from ._models import LLM, Embedder
from ._session import InferenceSession, NodeArg, get_available_providers
from ._train import Trainer

__all__ = [
    "Compiled", "DTypeError", "Embedder", "FileError", "Graph", "InferenceSession", "LLM",
    "NodeArg", "RlxError", "ShapeError", "Trainer", "UnsupportedError", "Value", "compile",
    "get_available_providers", "grad", "jvp", "vmap", "__version__",
]
