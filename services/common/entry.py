"""What every service's main() does: parse settings, then run on uvloop until signalled."""

from __future__ import annotations

import faulthandler
from collections.abc import Callable, Coroutine
from typing import Any

import uvloop


def run(coro_factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
    # A native crash (Ray's core worker, Paddle) prints every thread's Python stack to stderr, the
    # service's log: a SIGSEGV seen in CI otherwise leaves only the exit code -11.
    faulthandler.enable(all_threads=True)
    # uvloop roughly halves per-call overhead of grpc.aio servers compared to asyncio's loop.
    uvloop.run(coro_factory())
