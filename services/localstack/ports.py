"""Ports, ready files and readiness polling for processes the local stack starts.

A port chosen here and bound later by another process races with everything else on the
machine that binds ephemeral ports (Ray's many processes do, all the time). So: services bind
port 0 themselves and report the port in a ready file (read_ready_file); servers that cannot
(redis-server, whose `port 0` means no TCP listener; the Ray head's several ports) are started
with start_on_free_ports, which chooses, starts, and on a failure to bind chooses again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)

# Attempts of start_on_free_ports: each takes a fresh set of ports, so more than one lost race
# in a row means something other than a race.
BIND_ATTEMPTS = 5


class PortTaken(RuntimeError):
    """A process could not bind a port chosen for it: chosen again by start_on_free_ports."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_on_free_ports(start: Callable[[], T], what: str, attempts: int = BIND_ATTEMPTS) -> T:
    """Calls start (which chooses its ports anew each call) until it does not raise PortTaken."""
    for attempt in range(1, attempts + 1):
        try:
            return start()
        except PortTaken as exc:
            if attempt == attempts:
                raise
            log.warning("%s: %s; trying again on other ports (%d/%d)", what, exc, attempt, attempts)
    raise AssertionError("unreachable")


def read_ready_file(path: Path) -> dict | None:
    """The ready file a service writes once it serves (server.write_ready_file), or None before."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def wait_until(
    predicate: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.05, message: str = "condition"
) -> T:
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
        # Stopped means gone: a caller that checks right after (or reuses the process's ports)
        # must not see it still exiting. SIGKILL cannot be ignored; only uninterruptible I/O delays it.
        with contextlib.suppress(TimeoutError):
            wait_until(lambda: not pid_alive(pid), timeout=10, interval=0.05, message=f"pid {pid} to die")
