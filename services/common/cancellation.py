"""Cancellation that survives the libraries: redis-py (8.1) and grpc.aio can swallow a task's
cancellation inside a call (the call then returns or fails normally), so a loop that relied
only on CancelledError would spin on. Loops check here between calls instead."""

from __future__ import annotations

import asyncio


def cancelling() -> bool:
    """Whether the running task was asked to cancel (False outside a task)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def raise_if_cancelled() -> None:
    """Raises CancelledError when the running task was asked to cancel."""
    if cancelling():
        raise asyncio.CancelledError
