"""What every service's main() does: parse settings, then run on uvloop until signalled."""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import uvloop

log = logging.getLogger(__name__)

# The exit code of a service that ends itself because its Ray cluster was lost, to be started
# again in a fresh process (EX_TEMPFAIL): its supervisor (services/localstack/supervisor.py,
# Kubernetes' restartPolicy, compose's restart) does so at once.
EXIT_RAY_LOST = 75


def run(coro_factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
    # A native crash (Ray's core worker, Paddle) prints every thread's Python stack to stderr, the
    # service's log: a SIGSEGV seen in CI otherwise leaves only the exit code -11.
    faulthandler.enable(all_threads=True)
    # uvloop roughly halves per-call overhead of grpc.aio servers compared to asyncio's loop.
    uvloop.run(coro_factory())


def exit_for_a_fresh_process(reason: str) -> None:
    """Ends the process at once with EXIT_RAY_LOST, past every shutdown step: each of them would
    call Ray in a driver whose cluster is gone (the crash class of issue 21 point 3)."""
    log.warning("%s: exiting (code %d) to reconnect in a fresh process", reason, EXIT_RAY_LOST)
    logging.shutdown()  # flushes the log's handlers
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_RAY_LOST)
