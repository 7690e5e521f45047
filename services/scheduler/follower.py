"""RunFollower: drives one dispatched job, held under this replica's lease, to its next stop.

For the job's current attempt it starts the trainer run (StartRun with request_id
"<job>-attempt-<n>", so a restarted or second replica gets the same run back, never a second
one), follows WatchRun from the last run event persisted (run_seq), persists metrics and
checkpoints as job events, enforces the job's timeout, and ends the attempt: SUCCEEDED,
RETRYING (with backoff, resuming from the newest checkpoint) or FAILED, or the state a stop
asked for (CANCELLED, EARLY_STOPPED, TIMED_OUT). Every write names this replica as owner, so a
follower whose lease was taken over can change nothing (LeaseLost) and just ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TypeVar

import grpc
from grpc import aio
from redis.exceptions import RedisError

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2
from paddleray.services.common import errors, states
from paddleray.services.common.cancellation import cancelling, raise_if_cancelled
from paddleray.services.common.logs import log_context
from paddleray.services.scheduler import metrics
from paddleray.services.scheduler.job_states import (
    ACTIVE_STATES,
    STOP_INTENTS,
    IllegalTransition,
    LeaseLost,
    now_ts,
)
from paddleray.services.scheduler.jobs import JobManager
from paddleray.services.scheduler.settings import SchedulerSettings
from paddleray.services.scheduler.store import JobRecord, now_ms
from paddleray.services.scheduler.trainer_client import TRAINER_FAILED, TRANSIENT, TrainerClient
from paddleray.trainer.v1 import run_pb2
from paddleray.trainer.v1 import trainer_service_pb2 as ts

log = logging.getLogger(__name__)
T = TypeVar("T")
J = job_pb2.JobState
R = run_pb2.RunState
F = common_pb2.FailureKind
_RECONNECT_S = 0.5
# StartRun answered with a transient code is asked again after 0.5 s, 1 s, 2 s, ... up to this.
_START_BACKOFF_MAX_S = 10.0
# At most this many run events taken into one persisting pass (metrics events among them into one write).
_MAX_BATCH = 256


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


class _Gone(Exception):
    """The job is no longer this follower's to drive (ended, deleted or taken over)."""


def attempt_request_id(job_id: str, attempt: int) -> str:
    return f"{job_id}-attempt-{attempt}"


def backoff_s(policy, retry_number: int) -> float:
    """Wait before retry `retry_number` (1-based): initial * multiplier^(n-1), capped."""
    initial = policy.initial_backoff.ToNanoseconds() / 1e9 if policy.HasField("initial_backoff") else 1.0
    cap = policy.max_backoff.ToNanoseconds() / 1e9 if policy.HasField("max_backoff") else 300.0
    multiplier = policy.backoff_multiplier or 2.0
    return min(cap, initial * multiplier ** (retry_number - 1))


def failure(kind: common_pb2.FailureKind, message: str) -> common_pb2.Failure:
    return common_pb2.Failure(kind=kind, message=message)


def run_failure(change: run_pb2.RunStateChange, kind: common_pb2.FailureKind) -> common_pb2.Failure:
    """What the trainer said ended the run; `kind` when it said nothing (an older trainer)."""
    if change.HasField("failure"):
        return change.failure
    return failure(kind, change.reason)


def deadline_s(job: job_pb2.Job) -> float | None:
    """Epoch seconds when the job times out (its timeout counts from its first start)."""
    if not job.HasField("timeout") or not job.HasField("start_time"):
        return None
    return job.start_time.ToNanoseconds() / 1e9 + job.timeout.ToNanoseconds() / 1e9


class RunFollower:
    def __init__(self, manager: JobManager, trainer: TrainerClient, settings: SchedulerSettings,
                 placed: Callable[[str], None] | None = None) -> None:
        """placed(job_id): called once the job's run has left PENDING (its workers are placed)."""
        self.manager = manager
        self.placed = placed
        self.store = manager.store
        self.trainer = trainer
        self.settings = settings
        self.owner = settings.replica_id
        # Per job: (transient StartRun answers in a row, monotonic time of the first).
        self._start_tries: dict[str, tuple[int, float]] = {}

    async def follow(self, job_id: str) -> None:
        """Returns once the job left STARTING/RUNNING or is no longer ours."""
        try:
            await self._follow(job_id)
        finally:
            self._start_tries.pop(job_id, None)

    async def _follow(self, job_id: str) -> None:
        with log_context(job=job_id):
            while True:
                raise_if_cancelled()
                try:
                    record = await self._mine(job_id)
                    with log_context(attempt=record.job.attempts[-1].number):
                        await self._step(record)
                except (_Gone, LeaseLost, errors.NotFound):
                    return
                except IllegalTransition:
                    continue  # the job moved meanwhile; _mine decides whether it is still ours
                except (RedisError, OSError):
                    log.exception("Redis failed while following; retrying")
                    await asyncio.sleep(_RECONNECT_S)

    async def _mine(self, job_id: str) -> JobRecord:
        record = await self.store.get(job_id)
        if record is None or record.owner != self.owner or record.job.state not in ACTIVE_STATES:
            raise _Gone
        return record

    async def _step(self, record: JobRecord) -> None:
        job_id, job = record.job_id, record.job
        run = job.attempts[-1].run
        deadline = deadline_s(job)
        if not record.stop_intent and deadline is not None and time.time() >= deadline:
            await self._ask_stop(record, "timeout", f"ran past its timeout of {job.timeout.ToJsonString()}")
            return
        if record.stop_intent and not run:
            await self._end(record, STOP_INTENTS[record.stop_intent], record.stop_reason)
            return
        if not run:
            await self._start(record)
            return
        if record.stop_intent:
            await self._stop_run(run, record.stop_reason)
        remaining = None if deadline is None or record.stop_intent else max(0.0, deadline - time.time())
        try:
            async with asyncio.timeout(remaining):
                await self._watch(job_id, run, record.run_seq)
        except TimeoutError:
            pass  # the next step sees the deadline and stops the run

    async def _start(self, record: JobRecord) -> None:
        job_id, job = record.job_id, record.job
        attempt = job.attempts[-1]
        request = ts.StartRunRequest(spec=job.spec, request_id=attempt_request_id(job_id, attempt.number),
                                     job=job.name, labels=job.labels, tenant=job.tenant)
        if attempt.HasField("resumed_from"):
            request.resume_from.CopyFrom(attempt.resumed_from)
        deadline = deadline_s(job)
        if deadline is not None:
            request.timeout.FromNanoseconds(int(max(0.001, deadline - time.time()) * 1e9))
        claimed = time.monotonic()
        try:
            run = await self.trainer.start_run(request)
        except aio.AioRpcError as exc:
            await self._start_failed(record, exc)
            return
        self._start_tries.pop(job_id, None)
        metrics.DISPATCH_LATENCY.observe(time.monotonic() - claimed)
        while True:
            updated = job_pb2.Job()
            updated.CopyFrom(record.job)
            updated.attempts[-1].run = run.name
            updated.attempts[-1].start_time.CopyFrom(now_ts())
            if await self.manager.update(record, updated, owner=self.owner):
                log.info("attempt started as %s", run.name)
                return
            record = await self._mine(job_id)
            if record.job.attempts[-1].run:
                return

    async def _start_failed(self, record: JobRecord, exc: aio.AioRpcError) -> None:
        """A transient answer is asked again with backoff, for up to start_run_retry_s; the
        trainer failing on the request fails the attempt; a refusal fails the job."""
        code, job_id = exc.code(), record.job_id
        if code == grpc.StatusCode.CANCELLED and cancelling():
            raise asyncio.CancelledError from exc  # grpc.aio's report of our own cancellation
        if code in TRANSIENT:
            tries, first = self._start_tries.get(job_id, (0, time.monotonic()))
            if time.monotonic() - first < self.settings.start_run_retry_s:
                self._start_tries[job_id] = (tries + 1, first)
                wait = min(_START_BACKOFF_MAX_S, _RECONNECT_S * 2**tries)
                log.warning("StartRun failed for now (%s); asking again in %.1fs", code.name, wait)
                await asyncio.sleep(wait)
                return
        self._start_tries.pop(job_id, None)
        message = f"the trainer answered StartRun with {code.name}: {exc.details()}"
        if code in TRANSIENT:
            message = (f"the trainer did not take the run within {self.settings.start_run_retry_s:g}s "
                       f"(last answer {code.name}: {exc.details()})")
        if code in TRANSIENT or code in TRAINER_FAILED:
            await self._failed(record, message, failure(F.FAILURE_KIND_TRAINER_ERROR, message))
            return
        # A refusal of the request itself (an INVALID_ARGUMENT names its field): asking again
        # cannot pass, so no retry is spent on it.
        refused = f"the trainer refused the run: {exc.details()}"
        await self._end(record, J.JOB_STATE_FAILED, refused, failure=failure(F.FAILURE_KIND_TRAINER_ERROR, refused))

    async def _watch(self, job_id: str, run: str, after: int) -> None:
        try:
            async with contextlib.aclosing(batched(self.trainer.watch_run(run, after), _MAX_BATCH)) as batches:
                async for batch in batches:
                    raise_if_cancelled()  # a busy run never pauses for a cancellation to land
                    if self.placed is not None and any(
                        event.state_change.to_state not in (R.RUN_STATE_UNSPECIFIED, R.RUN_STATE_PENDING)
                        for event in batch
                    ):
                        self.placed(job_id)
                    await self._persist_batch(job_id, batch)
        except aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.CANCELLED and cancelling():
                # grpc.aio reports our own task's cancellation as a CANCELLED call.
                raise asyncio.CancelledError from exc
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                await self._run_lost(job_id, run)
                return
            log.warning("WatchRun of %s broke (%s); reconnecting", run, exc.code().name)
            await asyncio.sleep(_RECONNECT_S)
            return
        # The stream ended: normally after the terminal event (persisted above); otherwise the
        # trainer went away mid-stream, and the next step resumes from run_seq.
        try:
            state = (await self.trainer.get_run(run)).state
        except aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                await self._run_lost(job_id, run)
            else:
                await asyncio.sleep(_RECONNECT_S)
            return
        if state not in states.RUN_TERMINAL:
            await asyncio.sleep(_RECONNECT_S)

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

    async def _run_lost(self, job_id: str, run: str) -> None:
        record = await self._mine(job_id)
        if record.stop_intent:
            await self._end(record, STOP_INTENTS[record.stop_intent], record.stop_reason)
        else:
            reason = f"the trainer lost {run}"
            await self._failed(record, reason, failure(F.FAILURE_KIND_TRAINER_ERROR, reason))

    async def _failed(self, record: JobRecord, reason: str, cause: common_pb2.Failure,
                      fields: dict | None = None) -> None:
        """Ends the attempt as failed: RETRYING while the retry policy has retries for the
        failure's kind and the deadline allows, else FAILED."""
        job = record.job
        retries_used = len(job.attempts) - 1
        deadline = deadline_s(job)
        retryable = cause.kind not in job.retry_policy.non_retryable_kinds
        if retryable and retries_used < job.retry_policy.max_retries and (deadline is None or time.time() < deadline):
            wait = backoff_s(job.retry_policy, retries_used + 1)

            def retrying(j: job_pb2.Job) -> None:
                j.attempts[-1].state = J.JOB_STATE_FAILED
                j.attempts[-1].failure_reason = reason
                j.attempts[-1].failure.CopyFrom(cause)
                j.attempts[-1].end_time.CopyFrom(now_ts())

            # Never wait past the deadline: the dispatcher then ends the job TIMED_OUT on time.
            due_ms = now_ms() + int(wait * 1000)
            if deadline is not None:
                due_ms = min(due_ms, int(deadline * 1000))
            await self._transition(record, J.JOB_STATE_RETRYING, f"attempt failed: {reason}; retry in {wait:.1f}s",
                                   retrying, fields, delay_until_ms=due_ms)
            metrics.RETRIES.inc()
            return

        def failed(j: job_pb2.Job) -> None:
            j.attempts[-1].failure_reason = reason

        if not retryable and retries_used < job.retry_policy.max_retries:
            reason = f"{reason} (not retried: {common_pb2.FailureKind.Name(cause.kind)} is non-retryable)"
        await self._transition(record, J.JOB_STATE_FAILED, reason, failed, fields, failure=cause)

    async def _end(self, record: JobRecord, state: job_pb2.JobState, reason: str, fields: dict | None = None,
                   failure: common_pb2.Failure | None = None) -> None:
        if state == J.JOB_STATE_TIMED_OUT:
            metrics.TIMEOUTS.inc()
        await self._transition(record, state, reason, None, fields, failure=failure)

    async def _transition(self, record, state, reason, mutate, fields, delay_until_ms=None, failure=None) -> None:
        await self.manager.transition(record.job_id, state, reason, mutate=mutate, owner=self.owner, fields=fields,
                                      delay_until_ms=delay_until_ms, expect=ACTIVE_STATES, failure=failure)

    async def _ask_stop(self, record: JobRecord, intent: str, reason: str) -> None:
        job = job_pb2.Job()
        job.CopyFrom(record.job)
        await self.manager.update(record, job, owner=self.owner, fields={"stop_intent": intent, "stop_reason": reason})

    async def _stop_run(self, run: str, reason: str) -> None:
        try:
            await self.trainer.stop_run(run, reason, self.settings.stop_grace_s)
        except aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                log.warning("StopRun of %s failed (%s); will retry", run, exc.code().name)
                await asyncio.sleep(_RECONNECT_S)
