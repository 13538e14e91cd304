"""Dtype names: NumPy's (float32, bfloat16, ...) and rlx's (f32, bf16, ...)."""

from typing import Any

import numpy as np

_RLX = {
    "bool": "bool", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64", "complex64": "c64",
}


def rlx_name(dtype: Any) -> str:
    """rlx's short name of a dtype given as a NumPy dtype, type or either kind of name."""
    if isinstance(dtype, str) and dtype in _RLX.values():
        return dtype
    name = dtype if isinstance(dtype, str) and dtype in _RLX else np.dtype(dtype).name
    if name not in _RLX:
        raise TypeError(f"{dtype!r} has no rlx dtype")
    return _RLX[name]
