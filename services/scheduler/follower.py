"""RunFollower: drives one dispatched job, held under this replica's lease, to its next stop.

For the job's current attempt it starts the trainer run (StartRun with request_id
"<job>-attempt-<n>", so a restarted or second replica gets the same run back, never a second
one), follows WatchRun from the last run event persisted (run_seq), persists metrics and
checkpoints as job events, enforces the job's timeout, and ends the attempt: SUCCEEDED,
RETRYING (with backoff, resuming from the newest checkpoint) or FAILED, or the state a stop
asked for (CANCELLED, EARLY_STOPPED, TIMED_OUT). Every write names this replica as owner, so a
follower whose lease was taken over can change nothing (LeaseLost) and just ends.

This module starts, watches, times out and stops the run; persisting its events is
run_events.py's (RunEventWriter), ending the attempt attempt_ending.py's (AttemptEnding).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import grpc
from grpc import aio
from redis.exceptions import RedisError

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2
from paddleray.services.common import errors, states
from paddleray.services.common.cancellation import cancelling, raise_if_cancelled
from paddleray.services.common.logs import log_context
from paddleray.services.scheduler import metrics
from paddleray.services.scheduler.attempt_ending import _Gone, deadline_s, failure
from paddleray.services.scheduler.job_states import STOP_INTENTS, IllegalTransition, LeaseLost, now_ts
from paddleray.services.scheduler.jobs import JobManager
from paddleray.services.scheduler.run_events import RunEventWriter, batched
from paddleray.services.scheduler.settings import SchedulerSettings
from paddleray.services.scheduler.store import JobRecord
from paddleray.services.scheduler.trainer_client import TRAINER_FAILED, TRANSIENT, TrainerClient
from paddleray.trainer.v1 import run_pb2
from paddleray.trainer.v1 import trainer_service_pb2 as ts

log = logging.getLogger(__name__)
J = job_pb2.JobState
R = run_pb2.RunState
F = common_pb2.FailureKind
_RECONNECT_S = 0.5
# StartRun answered with a transient code is asked again after 0.5 s, 1 s, 2 s, ... up to this.
_START_BACKOFF_MAX_S = 10.0
# At most this many run events taken into one persisting pass (metrics events among them into one write).
_MAX_BATCH = 256


def attempt_request_id(job_id: str, attempt: int) -> str:
    return f"{job_id}-attempt-{attempt}"


class RunFollower(RunEventWriter):
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
