"""Runs in: a Serve replica.

Stacking concurrent requests into one batch along dimension 0, and splitting the outputs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

import numpy as np


def rows(inputs: Mapping[str, np.ndarray]) -> int | None:
    """The batch dimension shared by every input, or None when they disagree (or are scalars)."""
    sizes = {a.shape[0] if a.ndim else None for a in inputs.values()}
    if len(sizes) != 1:
        return None
    return sizes.pop()


def merge(requests: Sequence[Mapping[str, np.ndarray]]) -> tuple[dict[str, np.ndarray] | None, list[int]]:
    """The requests stacked along dim 0 and each one's row count; None when they cannot stack."""
    sizes = [size for r in requests if (size := rows(r)) is not None]
    if len(sizes) != len(requests):
        return None, []
    names = list(requests[0])
    for r in requests[1:]:
        if list(r) != names:
            return None, []
    merged = {}
    for name in names:
        parts = [r[name] for r in requests]
        if len({(p.dtype, p.shape[1:]) for p in parts}) != 1:
            return None, []
        merged[name] = np.concatenate(parts, axis=0)
    return merged, sizes


def split(outputs: Mapping[str, np.ndarray], sizes: Sequence[int]) -> list[dict[str, np.ndarray]]:
    """Each request's share of the batched outputs, in order."""
    bounds = np.cumsum([0, *sizes])
    return [{name: out[bounds[i] : bounds[i + 1]] for name, out in outputs.items()} for i in range(len(sizes))]


def dynamic_batching(
    one: Callable[[dict[str, np.ndarray]], Awaitable],
    many: Callable[[list[dict[str, np.ndarray]]], Awaitable[list]],
    max_batch_size: int,
    batch_wait_timeout_s: float,
) -> Callable[[dict[str, np.ndarray]], Awaitable]:
    """A runner that sends concurrent requests to `many` together (Serve's @serve.batch, up to
    max_batch_size rows, waiting at most batch_wait_timeout_s), and to `one` a request that
    cannot share a batch (no common batch dimension, or already max_batch_size rows).
    The batch queue belongs to the event loop of the first call."""
    if max_batch_size <= 1:
        return one
    from ray import serve

    @serve.batch(
        max_batch_size=max_batch_size,
        batch_wait_timeout_s=batch_wait_timeout_s,
        batch_size_fn=lambda items: sum(rows(i) or 1 for i in items),
    )
    async def batched(requests):
        return await many(requests)

    async def run(inputs):
        n = rows(inputs)
        return await (one(inputs) if n is None or n >= max_batch_size else batched(inputs))

    return run
