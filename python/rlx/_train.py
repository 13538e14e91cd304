"""`Trainer`: a graph's training step (gradients and optimizer update) compiled once."""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

from . import _rlx
from ._graph import Graph, Value


class Trainer:
    """Minimises `loss` over every parameter of `graph` with `optimizer` ("sgd", "nesterov",
    "adam", "adamw"); a warm-up cosine schedule when `total` > 0, else a constant `lr`."""

    def __init__(self, graph: Graph, loss: Value, optimizer: str = "adamw", lr: float = 1e-3, *,
                 momentum: float = 0.0, weight_decay: float = 0.0, clip_norm: float | None = None,
                 warmup: int = 0, total: int = 0, device: str = "cpu"):
        self._t = _rlx.Trainer(graph._g, graph._check(loss).handle, optimizer, lr, momentum,
                               weight_decay, clip_norm, warmup, total, device)

    def step(self, **batch: Any) -> float:
        """One update on the batch (arrays by input name); the loss before it."""
        return self._t.step(batch)

    def set_param(self, name: str, value: Any) -> None:
        self._t.set_param(name, value)

    def param(self, name: str) -> np.ndarray:
        return self._t.param(name)

    def params(self) -> list[str]:
        return self._t.params()

    @property
    def steps(self) -> int:
        return self._t.steps

    @property
    def lr(self) -> float:
        return self._t.lr

    def save(self, path: str | os.PathLike) -> None:
        self._t.save(os.fspath(path))

    def load(self, path: str | os.PathLike) -> None:
        self._t.load(os.fspath(path))
