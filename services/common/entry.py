"""What every service's main() does: parse settings, then run on uvloop until signalled."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import uvloop


def run(coro_factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
    # uvloop roughly halves per-call overhead of grpc.aio servers compared to asyncio's loop.
    uvloop.run(coro_factory())
