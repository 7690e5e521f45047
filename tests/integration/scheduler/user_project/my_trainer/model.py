"""The user's model: a small MLP over synthetic data the package makes itself."""

from __future__ import annotations

import numpy as np
import paddle

FEATURES = 8


def build_model(hidden: int) -> paddle.nn.Layer:
    return paddle.nn.Sequential(paddle.nn.Linear(FEATURES, hidden), paddle.nn.ReLU(), paddle.nn.Linear(hidden, 2))


def make_data(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two classes split by a fixed random hyperplane (the same on every rank for a seed)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, FEATURES)).astype("float32")
    y = (x @ rng.normal(size=FEATURES) > 0).astype("int64")
    return x, y
