"""A followed run's events made part of its job: read from WatchRun in batches (batched), then
metrics and checkpoints persisted as job events exactly once (run_seq is written with them),
and the run's state changes turned into the job's (RUNNING, or the attempt's end).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TypeVar

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2
from paddleray.services.scheduler.attempt_ending import AttemptEnding, run_failure
from paddleray.services.scheduler.job_states import STOP_INTENTS
from paddleray.services.scheduler.store import JobRecord
from paddleray.trainer.v1 import run_pb2

T = TypeVar("T")
J = job_pb2.JobState
R = run_pb2.RunState
F = common_pb2.FailureKind


class _StreamEnd:
    """What batched() queues when its stream ended: normally (error None) or with an error."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


async def batched(stream: AsyncIterator[T], limit: int) -> AsyncGenerator[list[T], None]:
    """The items of `stream` in lists: each list is what arrived while the consumer handled the
    previous one (one item when it keeps up, more when it falls behind), at most `limit`.
    The stream is read ahead by a task, up to `limit` items; an error of the stream is raised
    after the items before it were handed out."""
    queue: asyncio.Queue[T | _StreamEnd] = asyncio.Queue(limit)

    async def read() -> None:
        try:
            async for item in stream:
                await queue.put(item)
        except Exception as exc:  # noqa: BLE001 - handed to the consumer, in order
            await queue.put(_StreamEnd(exc))
        else:
            await queue.put(_StreamEnd(None))

    reader = asyncio.ensure_future(read())
    try:
        while True:
            items: list = [await queue.get()]
            while len(items) < limit and not queue.empty() and not isinstance(items[-1], _StreamEnd):
                items.append(queue.get_nowait())
            end = items.pop() if isinstance(items[-1], _StreamEnd) else None
            if items:
                yield items
            if end is not None:
                if end.error is not None:
                    raise end.error
                return
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()


class RunEventWriter(AttemptEnding):
    """Persists a followed run's events into its job, under this replica's lease."""

    async def _persist_batch(self, job_id: str, batch: list[run_pb2.RunEvent]) -> None:
        """Persists events in their order: a run of metrics events in one write, others one by one."""
        metrics_run: list[run_pb2.RunEvent] = []
        for event in batch:
            if event.WhichOneof("payload") == "metrics":
                metrics_run.append(event)
                continue
            if metrics_run:
                await self._persist_metrics(job_id, metrics_run)
                metrics_run = []
            await self._persist(job_id, event)
        if metrics_run:
            await self._persist_metrics(job_id, metrics_run)

    async def _persist_metrics(self, job_id: str, events: list[run_pb2.RunEvent]) -> None:
        """Makes metrics events part of the job, exactly once, in one compare-and-set write (one
        read and one Lua call for however many arrived while the last write was made: with
        hundreds of runs reporting, a write per report was the scheduler's load, bench concurrency)."""
        if len(events) == 1:
            await self._persist(job_id, events[0])
            return
        while True:
            record = await self._mine(job_id)
            new = [event for event in events if event.sequence > record.run_seq]
            if not new:
                return
            attempt = record.job.attempts[-1].number
            job = job_pb2.Job()
            job.CopyFrom(record.job)
            job.latest_metrics.CopyFrom(new[-1].metrics)
            job_events = [job_pb2.JobEvent(time=event.time, attempt=attempt, metrics=event.metrics) for event in new]
            if await self.manager.update(record, job, job_events, owner=self.owner,
                                         fields={"run_seq": new[-1].sequence}):
                for event in new:
                    await self.manager.hooks.metrics(job.name, attempt, event.metrics)
                return

    async def _persist(self, job_id: str, event: run_pb2.RunEvent) -> None:
        """Makes one run event part of the job, exactly once (run_seq is written with it)."""
        kind = event.WhichOneof("payload")
        while True:
            record = await self._mine(job_id)
            if event.sequence <= record.run_seq:
                return
            attempt = record.job.attempts[-1].number
            fields: dict[str, str | int] = {"run_seq": event.sequence}
            if kind == "state_change":
                await self._on_run_state(record, event.state_change, fields)
                return
            job = job_pb2.Job()
            job.CopyFrom(record.job)
            job_event = job_pb2.JobEvent(time=event.time, attempt=attempt)
            if kind == "metrics":
                job.latest_metrics.CopyFrom(event.metrics)
                job_event.metrics.CopyFrom(event.metrics)
            elif kind == "checkpoint":
                job.latest_checkpoint.CopyFrom(event.checkpoint)
                job_event.checkpoint.CopyFrom(event.checkpoint)
            if await self.manager.update(record, job, [job_event] if kind else [], owner=self.owner, fields=fields):
                if kind == "metrics":
                    await self.manager.hooks.metrics(job.name, attempt, event.metrics)
                elif kind == "checkpoint":
                    await self.manager.hooks.checkpoint(job.name, attempt, event.checkpoint)
                return

    async def _on_run_state(self, record: JobRecord, change: run_pb2.RunStateChange, fields: dict) -> None:
        to = change.to_state
        if to == R.RUN_STATE_RUNNING and record.job.state == J.JOB_STATE_STARTING:
            def running(job: job_pb2.Job) -> None:
                job.attempts[-1].state = J.JOB_STATE_RUNNING

            await self._transition(record, J.JOB_STATE_RUNNING, "run started", running, fields)
        elif to == R.RUN_STATE_SUCCEEDED:
            await self._end(record, J.JOB_STATE_SUCCEEDED, change.reason or "run succeeded", fields)
        elif to == R.RUN_STATE_TIMED_OUT:
            await self._end(record, J.JOB_STATE_TIMED_OUT, change.reason or "run timed out", fields,
                            failure=run_failure(change, F.FAILURE_KIND_TIMEOUT))
        elif to == R.RUN_STATE_STOPPED and record.stop_intent:
            await self._end(record, STOP_INTENTS[record.stop_intent], record.stop_reason, fields)
        elif to == R.RUN_STATE_STOPPED:
            await self._failed(record, f"run stopped outside the scheduler: {change.reason}",
                               run_failure(change, F.FAILURE_KIND_STOPPED), fields)
        elif to == R.RUN_STATE_FAILED:
            await self._failed(record, change.reason or "run failed",
                               run_failure(change, F.FAILURE_KIND_UNSPECIFIED), fields)
        else:
            job = job_pb2.Job()
            job.CopyFrom(record.job)
            await self.manager.update(record, job, owner=self.owner, fields=fields)
