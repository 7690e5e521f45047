"""Callbacks other scheduler parts (experiments) register to hear about jobs.

`on_metrics(job_name, attempt, MetricsReport)` is awaited for every metrics report the
dispatcher persists, `on_checkpoint(job_name, attempt, Checkpoint)` for every checkpoint, and
`on_terminal(job_name, JobState)` after a job reaches a terminal state.
Both run in the replica that made the change, after it is durable, at most once per change
per replica; a replica that crashes in between never calls them, so listeners must be able
to catch up from the stored jobs (ListJobs by experiment) when they start. A listener that
raises is logged and does not affect the job or the other listeners.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from paddleray.common.v1 import common_pb2

log = logging.getLogger(__name__)

MetricsListener = Callable[[str, int, common_pb2.MetricsReport], Awaitable[None]]
CheckpointListener = Callable[[str, int, common_pb2.Checkpoint], Awaitable[None]]
TerminalListener = Callable[[str, int], Awaitable[None]]


class JobHooks:
    def __init__(self) -> None:
        self._metrics: list[MetricsListener] = []
        self._checkpoints: list[CheckpointListener] = []
        self._terminal: list[TerminalListener] = []

    def on_metrics(self, listener: MetricsListener) -> None:
        """Registers `async listener(job_name, attempt, report)`."""
        self._metrics.append(listener)

    def on_checkpoint(self, listener: CheckpointListener) -> None:
        """Registers `async listener(job_name, attempt, checkpoint)`."""
        self._checkpoints.append(listener)

    def on_terminal(self, listener: TerminalListener) -> None:
        """Registers `async listener(job_name, job_state)` (a JobState number)."""
        self._terminal.append(listener)

    async def metrics(self, job_name: str, attempt: int, report: common_pb2.MetricsReport) -> None:
        await _notify("on_metrics", self._metrics, job_name, attempt, report)

    async def checkpoint(self, job_name: str, attempt: int, checkpoint: common_pb2.Checkpoint) -> None:
        await _notify("on_checkpoint", self._checkpoints, job_name, attempt, checkpoint)

    async def terminal(self, job_name: str, state: int) -> None:
        await _notify("on_terminal", self._terminal, job_name, state)


async def _notify(kind: str, listeners: Sequence[Callable[..., Awaitable[None]]], job_name: str, *args: Any) -> None:
    for listener in listeners:
        try:
            await listener(job_name, *args)
        except Exception:  # noqa: BLE001 - a listener's bug must not break dispatch
            log.exception("%s listener failed for %s", kind, job_name)
