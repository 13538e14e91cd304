"""NumPy in and out: zero-copy outputs, non-contiguous and DLPack inputs, half floats."""

import numpy as np
import pytest

import rlx


def identity_plus_one(dtype="float32"):
    g = rlx.Graph()
    x = g.input("x", ["N", "M"], dtype)
    g.outputs(x + 1.0)
    return rlx.compile(g)


def test_outputs_view_rlx_memory(rng):
    c = identity_plus_one()
    x = rng.standard_normal((3, 5)).astype(np.float32)
    y = c(x=x)
    assert not y.flags.owndata and type(y.base).__name__ == "TensorHolder"
    np.testing.assert_array_equal(y, x + 1)
    del c
    np.testing.assert_array_equal(y, x + 1)


def test_non_contiguous_and_list_inputs(rng):
    c = identity_plus_one()
    x = rng.standard_normal((6, 8)).astype(np.float32)
    np.testing.assert_array_equal(c(x=x[::2, 1::3]), x[::2, 1::3] + 1)
    np.testing.assert_array_equal(c(x=x.T), x.T + 1)
    np.testing.assert_array_equal(c(x=[[1, 2], [3, 4]]), np.array([[2, 3], [4, 5]], np.float32))


def test_dlpack_in_and_out(rng):
    c = identity_plus_one()
    x = rng.standard_normal((2, 3)).astype(np.float32)

    class Foreign:
        """Exports only through DLPack, as a torch or jax CPU tensor does."""

        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    y = c(x=Foreign(x))
    np.testing.assert_array_equal(y, x + 1)
    z = np.from_dlpack(y)
    assert np.shares_memory(z, y)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "int32"])
def test_dtypes_round_trip(dtype, rng):
    if dtype == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        np_dtype = np.dtype(ml_dtypes.bfloat16)
    else:
        np_dtype = np.dtype(dtype)
    g = rlx.Graph()
    x = g.input("x", [4, 3], dtype)
    g.outputs(g.cast(g.cast(x, "float32") * 2.0, dtype))
    x = (rng.standard_normal((4, 3)) * 8).astype(np_dtype)
    y = rlx.compile(g)(x=x)
    assert y.dtype == np_dtype
    np.testing.assert_array_equal(y.astype(np.float64), (x.astype(np.float32) * 2).astype(np_dtype).astype(np.float64))


def test_dtype_and_shape_errors(rng):
    c = identity_plus_one()
    with pytest.raises(rlx.DTypeError):
        c(x=np.zeros((2, 2), np.float64))
    with pytest.raises(rlx.ShapeError):
        c(x=np.zeros((2, 2, 2), np.float32))
    with pytest.raises(rlx.RlxError, match="not given"):
        c()
