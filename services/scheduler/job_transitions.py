"""The job state machine's writes: transitions, the dispatcher's claim, state-keeping updates,
parking, and stopping a job (cancel, early stop).

Every state change goes through `JobManager.transition`, or `JobManager.claim` for the one
change the dispatcher makes (a waiting job to STARTING with a new attempt): each reads the
job, checks the move against ALLOWED (job_states.py), and writes it with a compare-and-set on
the version it read (store.update / store.claim), so an illegal transition cannot be written
even by two replicas racing; a lost race is re-read and re-checked. Each change is timestamped
and appends a JobStateChange event.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2
from paddleray.services.common import errors, identity, names
from paddleray.services.common.identity import Identity
from paddleray.services.scheduler import tenancy
from paddleray.services.scheduler.hooks import JobHooks
from paddleray.services.scheduler.job_reads import JobReads
from paddleray.services.scheduler.job_states import (
    ACTIVE_STATES,
    ALLOWED,
    STOP_INTENTS,
    WAITING_STATES,
    IllegalTransition,
    J,
    LeaseLost,
    is_terminal,
    now_ts,
    state_event,
)
from paddleray.services.scheduler.store import Claim, JobRecord, WriteResult

log = logging.getLogger(__name__)

F = common_pb2.FailureKind
# The kind of failure a job ending in one of these states carries when its caller names none.
_FAILURE_OF_STATE: dict[int, common_pb2.FailureKind] = {J.JOB_STATE_TIMED_OUT: F.FAILURE_KIND_TIMEOUT, J.JOB_STATE_CANCELLED: F.FAILURE_KIND_STOPPED,
                     J.JOB_STATE_EARLY_STOPPED: F.FAILURE_KIND_STOPPED, J.JOB_STATE_FAILED: F.FAILURE_KIND_TRAINER_ERROR}


def _ended_by(state: int, reason: str, failure: common_pb2.Failure | None) -> common_pb2.Failure | None:
    if state == J.JOB_STATE_SUCCEEDED:
        return None
    return failure if failure is not None else common_pb2.Failure(kind=_FAILURE_OF_STATE[state], message=reason)


# Takes the job as read (a copy to change in place); may raise to abandon the transition.
Mutation = Callable[[job_pb2.Job], None]
# Stops a trainer run ("runs/{id}", reason), best effort: the run's follower stops it too.
RunStopper = Callable[[str, str], Awaitable[None]]


class JobTransitions(JobReads):
    """The writes of JobManager. stop_run: how CancelJob and early stopping reach a dispatched
    job's trainer run (None: only the run's follower stops it, when it sees the stop intent)."""

    hooks: JobHooks
    stop_wait_s: float
    _stop_run: RunStopper | None

    # -- the state machine ------------------------------------------------------------------

    async def transition(
        self, job_id: str, to_state: job_pb2.JobState, reason: str, *, mutate: Mutation | None = None, owner: str = "",
        delay_until_ms: int | None = None, fields: dict[str, str | int] | None = None,
        expect: frozenset[int] | None = None, failure: common_pb2.Failure | None = None,
    ) -> job_pb2.Job:
        """Moves a job to to_state if ALLOWED from the state it is in, atomically.

        A job that ends other than SUCCEEDED gets a Failure (Job.failure, and on its attempt
        still open): `failure` when given, else one of the kind its end state implies.

        `expect` narrows the states the caller accepts to start from (IllegalTransition
        otherwise); `owner` makes the write conditional on holding the job's lease (LeaseLost).
        Leaving STARTING/RUNNING gives back the job's reserved resources; entering a terminal
        or waiting state takes it off the queue as needed; RETRYING waits until delay_until_ms.
        """
        while True:
            record = await self.store.get(job_id)
            if record is None:
                raise errors.NotFound(f"{names.JOB.format(job=job_id)} not found")
            from_state = record.job.state
            if to_state not in ALLOWED.get(from_state, ()) or (expect is not None and from_state not in expect):
                raise IllegalTransition(record.job.name, from_state, to_state)
            job = job_pb2.Job()
            job.CopyFrom(record.job)
            if mutate is not None:
                mutate(job)
            now = now_ts()
            job.state, job.state_reason = to_state, reason
            job.update_time.CopyFrom(now)
            if is_terminal(to_state):
                job.end_time.CopyFrom(now)
                ended_by = _ended_by(to_state, reason, failure)
                if ended_by is not None:
                    job.failure.CopyFrom(ended_by)
                if job.attempts and not is_terminal(job.attempts[-1].state):
                    job.attempts[-1].state = to_state
                    job.attempts[-1].end_time.CopyFrom(now)
                    if ended_by is not None:
                        job.attempts[-1].failure.CopyFrom(ended_by)
            attempt = job.attempts[-1].number if job.attempts else 0
            event = state_event(from_state, to_state, reason, attempt)
            event.time.CopyFrom(now)
            result = await self.store.update(
                record, job, [event], owner=owner,
                dequeue=from_state in WAITING_STATES and to_state not in WAITING_STATES,
                delay_until_ms=delay_until_ms if to_state == J.JOB_STATE_RETRYING else None,
                release=from_state in ACTIVE_STATES and to_state not in ACTIVE_STATES,
                fields=fields,
            )
            if self._settled(result, job_id):
                log.info("job %s: %s -> %s (%s)", job.name, J.Name(from_state), J.Name(to_state), reason)
                if is_terminal(to_state):
                    await self.hooks.terminal(job.name, to_state)
                return job

    async def explain_waiting(self, record: JobRecord, reason: str) -> bool:
        """Sets a waiting job's state_reason (why it is not dispatched) and leaves everything else
        as it is, update_time too: the time it has waited is what the dispatcher reads from it.
        False when the job changed meanwhile or is no longer waiting."""
        if record.job.state not in WAITING_STATES or record.job.state_reason == reason:
            return False
        job = job_pb2.Job()
        job.CopyFrom(record.job)
        job.state_reason = reason
        return self._settled(await self.store.update(record, job), record.job_id)

    async def park(self, unfit: Sequence[tuple[JobRecord, str]]) -> list[bool]:
        """Takes queued jobs the cluster can never hold, as it is, out of the queue into the
        parked set, each one's state_reason saying why (state and update_time stay); one round
        trip. Per job, False when it changed meanwhile or is no longer queued."""
        return await self.store.park([(record, _with_reason(record.job, reason)) for record, reason in unfit])

    async def unpark(self, records: Sequence[JobRecord]) -> list[bool]:
        """Puts parked jobs back into the queue at their old positions, their reasons cleared
        (the cluster changed: they may fit now)."""
        return await self.store.unpark([(record, _with_reason(record.job, "")) for record in records])

    async def claim(self, record: JobRecord, owner: str, lease_ms: int, limits: Claim) -> WriteResult:
        """Moves a waiting job to STARTING with a new attempt, if it fits `limits` (cluster
        capacity, tenant caps), leased to owner for lease_ms: one atomic claim (store.claim).

        The attempt resumes from the job's newest checkpoint when it is a retry. Returns the
        store's result: "ok", "conflict" (the job changed since `record` was read, or may not
        start from its state), "no_room", "tenant_limit"."""
        from_state = record.job.state
        if from_state not in WAITING_STATES or J.JOB_STATE_STARTING not in ALLOWED[from_state]:
            return WriteResult("conflict")
        job = job_pb2.Job()
        job.CopyFrom(record.job)
        now = now_ts()
        attempt = job.attempts.add(number=len(job.attempts) + 1, state=J.JOB_STATE_STARTING)
        if attempt.number > 1 and job.HasField("latest_checkpoint"):
            attempt.resumed_from.CopyFrom(job.latest_checkpoint)
        if not job.HasField("start_time"):
            job.start_time.CopyFrom(now)
        reason = "dispatched" if attempt.number == 1 else f"retry {attempt.number - 1}"
        job.state, job.state_reason = J.JOB_STATE_STARTING, reason
        job.update_time.CopyFrom(now)
        event = state_event(from_state, J.JOB_STATE_STARTING, reason, attempt.number)
        event.time.CopyFrom(now)
        return await self.store.claim(record, job, event, owner, lease_ms, limits)

    async def update(self, record: JobRecord, job: job_pb2.Job, events=(), *, owner: str = "",
                     fields: dict[str, str | int] | None = None) -> bool:
        """A compare-and-set write that keeps the state; False when the job changed meanwhile.

        A state change here would skip ALLOWED and its event: it is refused (transition/claim
        record every state change)."""
        if job.state != record.job.state:
            raise ValueError(f"{record.job.name}: update() keeps the state; use transition() to change it")
        job.update_time.CopyFrom(now_ts())
        return self._settled(await self.store.update(record, job, list(events), owner=owner, fields=fields),
                             record.job_id)

    @staticmethod
    def _settled(result: WriteResult, job_id: str) -> bool:
        if result.status == "lost":
            raise LeaseLost(job_id)
        if result.status == "missing":
            raise errors.NotFound(f"{names.JOB.format(job=job_id)} not found")
        return result.ok

    # -- stopping -----------------------------------------------------------------------------

    async def cancel(self, name: str, reason: str = "", *, caller: Identity) -> job_pb2.Job:
        """CancelJob: a waiting job ends CANCELLED at once; a dispatched one is stopped on the
        trainer and ends CANCELLED when its run has stopped (waited for up to stop_wait_s)."""
        identity.require_write(caller, "CancelJob")
        await self._visible(name, caller)
        return tenancy.shown(caller, await self._stop(name, "cancel", reason or "cancelled by request"))

    async def stop_early(self, name: str, reason: str) -> job_pb2.Job:
        """Ends a sweep trial in JOB_STATE_EARLY_STOPPED with `reason`: a waiting trial at once,
        a running one after its trainer run has stopped (waited for up to stop_wait_s).
        Returns the job as it then is; a job already terminal is returned unchanged."""
        return await self._stop(name, "early_stop", reason)

    async def _stop(self, name: str, intent: str, reason: str) -> job_pb2.Job:
        job_id = names.JOB.parse_one(name)
        target = STOP_INTENTS[intent]
        while True:
            record = await self.record(name)
            state = record.job.state
            if is_terminal(state):
                return record.job
            if state in WAITING_STATES:
                try:
                    return await self.transition(job_id, target, reason, expect=WAITING_STATES)
                except IllegalTransition:
                    continue  # dispatched meanwhile: stop it as a running job
            if record.stop_intent:
                break
            job = job_pb2.Job()
            job.CopyFrom(record.job)
            if await self.update(record, job, fields={"stop_intent": intent, "stop_reason": reason}):
                break
        # The run's owner (this or another replica) ends the job once the run has stopped; a
        # job still STARTING is stopped by its owner as soon as its run exists.
        record = await self.record(name)
        run = record.job.attempts[-1].run if record.job.attempts else ""
        if run and self._stop_run is not None:
            await self._stop_run(run, reason)
        return await self.wait_terminal(name, self.stop_wait_s)

    async def wait_terminal(self, name: str, timeout_s: float) -> job_pb2.Job:
        """Returns the job once terminal, or as it is after timeout_s.

        Bounded by its own deadline rather than by cancelling a blocking read: redis-py can
        swallow a cancellation that lands inside a call."""
        job_id = names.JOB.parse_one(name)
        deadline = time.monotonic() + timeout_s
        record = await self.record(name)
        seen = record.seq
        while not is_terminal(record.job.state):
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                break
            events = await self.store.events_after(job_id, seen, block_ms=min(1000, remaining_ms))
            if events:
                seen = events[-1].sequence
            record = await self.record(name)
        return record.job


def _with_reason(job: job_pb2.Job, reason: str) -> job_pb2.Job:
    changed = job_pb2.Job()
    changed.CopyFrom(job)
    changed.state_reason = reason
    return changed
