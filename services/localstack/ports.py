"""Free ports and readiness polling for processes the local stack starts."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def wait_until(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.05, message: str = "condition") -> T:
    """Polls predicate until it returns a truthy value; raises TimeoutError after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def pid_alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie child of ours (reaping it if it is)."""
    with contextlib.suppress(ChildProcessError):
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_process(pid: int, grace_period_s: float, sig: signal.Signals = signal.SIGTERM) -> None:
    """Sends sig, waits up to grace_period_s, then SIGKILLs the process's group."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    try:
        wait_until(lambda: not pid_alive(pid), timeout=grace_period_s, interval=0.1, message=f"pid {pid} to exit")
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
