"""Shared helpers: fresh random inputs, the repo's folders, the relative-error measure."""

import os
import pathlib

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def rng():
    """A generator seeded differently on every run (the seed is printed on failure)."""
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}")
    return np.random.default_rng(seed)


def rel_err(got, want):
    """max |got - want| / max |want|, in float64."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def models_dir():
    return pathlib.Path(os.environ.get("RLX_MODELS_DIR", "/work/.models"))
