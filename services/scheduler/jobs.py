"""Jobs as a domain: creation, the state machine, cancellation and early stopping.

Every state change goes through `JobManager.transition`, or `JobManager.claim` for the one
change the dispatcher makes (a waiting job to STARTING with a new attempt): each reads the
job, checks the move against ALLOWED, and writes it with a compare-and-set on the version it
read (store.update / store.claim), so an illegal transition cannot be written even by two
replicas racing; a lost race is re-read and re-checked. Each change is timestamped and
appends a JobStateChange event. Other components read jobs through `find` / `find_many`,
never through the store.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Protocol

from google.protobuf import timestamp_pb2

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2
from paddleray.services.common import errors, idempotency, identity, names, paging, states
from paddleray.services.common.cancellation import raise_if_cancelled
from paddleray.services.common.identity import Identity
from paddleray.services.scheduler import tenancy, validation
from paddleray.services.scheduler.hooks import JobHooks
from paddleray.services.scheduler.store import Claim, JobRecord, JobStore, WriteResult

log = logging.getLogger(__name__)

J = job_pb2.JobState
ALLOWED: dict[int, frozenset[int]] = {
    J.JOB_STATE_QUEUED: frozenset({J.JOB_STATE_STARTING, J.JOB_STATE_CANCELLED, J.JOB_STATE_EARLY_STOPPED}),
    J.JOB_STATE_STARTING: frozenset({
        J.JOB_STATE_RUNNING, J.JOB_STATE_SUCCEEDED, J.JOB_STATE_FAILED, J.JOB_STATE_RETRYING,
        J.JOB_STATE_CANCELLED, J.JOB_STATE_TIMED_OUT, J.JOB_STATE_EARLY_STOPPED,
    }),
    J.JOB_STATE_RUNNING: frozenset({
        J.JOB_STATE_SUCCEEDED, J.JOB_STATE_FAILED, J.JOB_STATE_RETRYING, J.JOB_STATE_CANCELLED,
        J.JOB_STATE_TIMED_OUT, J.JOB_STATE_EARLY_STOPPED,
    }),
    J.JOB_STATE_RETRYING: frozenset({
        J.JOB_STATE_STARTING, J.JOB_STATE_FAILED, J.JOB_STATE_CANCELLED, J.JOB_STATE_TIMED_OUT,
        J.JOB_STATE_EARLY_STOPPED,
    }),
}
# States that hold reserved cluster resources and a dispatch lease.
ACTIVE_STATES = frozenset({J.JOB_STATE_STARTING, J.JOB_STATE_RUNNING})
WAITING_STATES = frozenset({J.JOB_STATE_QUEUED, J.JOB_STATE_RETRYING})
STOP_INTENTS = {"cancel": J.JOB_STATE_CANCELLED, "early_stop": J.JOB_STATE_EARLY_STOPPED,
                "timeout": J.JOB_STATE_TIMED_OUT}
F = common_pb2.FailureKind
# The kind of failure a job ending in one of these states carries when its caller names none.
_FAILURE_OF_STATE: dict[int, common_pb2.FailureKind] = {J.JOB_STATE_TIMED_OUT: F.FAILURE_KIND_TIMEOUT, J.JOB_STATE_CANCELLED: F.FAILURE_KIND_STOPPED,
                     J.JOB_STATE_EARLY_STOPPED: F.FAILURE_KIND_STOPPED, J.JOB_STATE_FAILED: F.FAILURE_KIND_TRAINER_ERROR}


class IllegalTransition(errors.FailedPrecondition):
    def __init__(self, job_name: str, from_state: int, to_state: int) -> None:
        super().__init__(f"{job_name}: cannot go from {J.Name(from_state)} to {J.Name(to_state)}")


class LeaseLost(Exception):
    """Another replica took the job over; this one must stop acting for it."""


def is_terminal(state: int) -> bool:
    return state in states.JOB_TERMINAL


def _ended_by(state: int, reason: str, failure: common_pb2.Failure | None) -> common_pb2.Failure | None:
    if state == J.JOB_STATE_SUCCEEDED:
        return None
    return failure if failure is not None else common_pb2.Failure(kind=_FAILURE_OF_STATE[state], message=reason)


def now_ts() -> timestamp_pb2.Timestamp:
    # FromNanoseconds: GetCurrentTime goes through datetime and costs several times more.
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(time.time_ns())
    return ts


def state_event(from_state: job_pb2.JobState, to_state: job_pb2.JobState, reason: str,
                attempt: int) -> job_pb2.JobEvent:
    return job_pb2.JobEvent(
        time=now_ts(), attempt=attempt,
        state_change=job_pb2.JobStateChange(from_state=from_state, to_state=to_state, reason=reason),
    )


# Takes the job as read (a copy to change in place); may raise to abandon the transition.
Mutation = Callable[[job_pb2.Job], None]
# Stops a trainer run ("runs/{id}", reason), best effort: the run's follower stops it too.
RunStopper = Callable[[str, str], Awaitable[None]]


class SpecPreparer(Protocol):
    """Checks what a spec names outside the job (package, init_from) with caller's rights and
    returns the spec to store; field is the prefix for errors (JobInputs.prepare)."""

    def __call__(self, spec: common_pb2.TrainingSpec, field: str, *,
                 caller: Identity) -> Awaitable[common_pb2.TrainingSpec]: ...


async def _as_is(spec: common_pb2.TrainingSpec, field: str, *, caller: Identity) -> common_pb2.TrainingSpec:
    return spec


class JobManager:
    """The job operations every entry point (servicer, dispatcher, experiments) calls.

    The RPCs' operations (create, get, list, cancel, delete, watch) take the caller and apply
    the tenant rules (tenancy.py, common.identity): another tenant's job is NOT_FOUND, as a
    missing one; a read-only caller may not create, cancel or delete.

    stop_run: how CancelJob and early stopping reach a dispatched job's trainer run (None: only
    the run's follower stops it, when it sees the stop intent). queued: set whenever a job is
    queued, so that a dispatcher waiting on it wakes at once."""

    def __init__(self, store: JobStore, aging_s_per_priority: float = 60.0, stop_wait_s: float = 15.0, *,
                 prepare_spec: SpecPreparer = _as_is, stop_run: RunStopper | None = None,
                 queued: asyncio.Event | None = None) -> None:
        self.store = store
        self.prepare_spec = prepare_spec
        self.hooks = JobHooks()
        self.aging_s_per_priority = aging_s_per_priority
        self.stop_wait_s = stop_wait_s
        self._stop_run = stop_run
        self._queued = queued if queued is not None else asyncio.Event()

    # -- create -------------------------------------------------------------------------------

    async def create(self, job: job_pb2.Job | None, job_id: str = "", request_id: str = "", *,
                     caller: Identity) -> job_pb2.Job:
        """CreateJob: validates, then stores the job QUEUED (durable before this returns). The
        job's tenant is caller's (an admin may name another); what the spec names outside the
        job is read with caller's rights (prepare_spec)."""
        tenant = tenancy.prepare_job(caller, job)
        validation.validate_create(job, job_id, request_id)
        assert job is not None  # validate_create: "job: required"
        created = await self._create(job, job_id, request_id, experiment="", trial_parameters=None, caller=caller)
        tenancy.check_created(tenant, created.tenant)
        return tenancy.shown(caller, created)

    async def create_trial(
        self, job: job_pb2.Job, experiment: str, trial_parameters: dict[str, str], job_id: str = "",
        request_id: str = "", *, caller: Identity,
    ) -> job_pb2.Job:
        """Creates a sweep trial: `job` (the trial template with its parameters merged into
        spec.config) is validated like CreateJob, stored with Job.experiment and
        Job.trial_parameters set, and queued like any job. A repeated request_id returns the
        trial first created with it, so an experiment can re-issue a create after a crash."""
        validation.validate_create(job, job_id, request_id)
        return await self._create(job, job_id, request_id, experiment, trial_parameters, caller=caller)

    async def _create(self, job, job_id, request_id, experiment, trial_parameters, *, caller: Identity) -> job_pb2.Job:
        stored = job_pb2.Job(
            display_name=job.display_name, spec=job.spec, priority=job.priority, tenant=job.tenant or "default",
            labels=job.labels, retry_policy=job.retry_policy, experiment=experiment,
            trial_parameters=trial_parameters or {},
        )
        if job.HasField("timeout"):
            stored.timeout.CopyFrom(job.timeout)
        # The request as asked, before its references are resolved (a retry may find init_from's
        # job with a newer checkpoint): a repeated request_id must repeat exactly this.
        fingerprint = idempotency.fingerprint(stored, job_id)
        stored.spec.CopyFrom(await self.prepare_spec(job.spec, "job.spec", caller=caller))
        stored.name = names.JOB.format(job=job_id or f"job-{uuid.uuid4().hex[:16]}")
        stored.state = J.JOB_STATE_QUEUED
        stored.create_time.CopyFrom(now_ts())
        stored.update_time.CopyFrom(stored.create_time)
        # Lower runs first: waiting aging_s_per_priority seconds is worth one priority point,
        # so priority orders jobs, ties go first come first served, and nothing starves.
        score = stored.create_time.ToMilliseconds() / 1000 - stored.priority * self.aging_s_per_priority
        event = state_event(J.JOB_STATE_UNSPECIFIED, J.JOB_STATE_QUEUED, "created", 0)
        event.time.CopyFrom(stored.create_time)
        status, existing, first = await self.store.create(stored, event, score, request_id, fingerprint)
        if status == "duplicate" and existing is not None:
            idempotency.check_repeat(first, fingerprint)
            return existing
        if status == "exists":
            # redis-py resends a command after a dropped connection; if the first send was
            # executed, the job found is this very one, not another request's.
            found = await self.store.get(names.JOB.parse_one(stored.name))
            if found is None or found.job.create_time != stored.create_time or found.job.spec != stored.spec:
                raise errors.AlreadyExists(f"{stored.name} already exists")
            return found.job
        self._queued.set()
        return stored

    # -- read ---------------------------------------------------------------------------------

    async def get(self, name: str, *, caller: Identity) -> job_pb2.Job:
        """The job as caller may see it (tenancy.shown)."""
        return tenancy.shown(caller, await self._visible(name, caller))

    async def _visible(self, name: str, caller: Identity) -> job_pb2.Job:
        """The job, or NOT_FOUND (as for a missing job) when caller may not see its tenant."""
        job = (await self.record(name)).job
        identity.check_visible(caller, job.tenant, name)
        return job

    async def record(self, name: str) -> JobRecord:
        record = await self.store.get(names.JOB.parse_one(name))
        if record is None:
            raise errors.NotFound(f"{name} not found")
        return record

    async def find(self, job_id: str) -> job_pb2.Job | None:
        """The job with this id, or None (no error: callers such as experiments expect gaps)."""
        record = await self.store.get(job_id)
        return record.job if record is not None else None

    async def find_many(self, job_ids: list[str]) -> list[job_pb2.Job | None]:
        """The jobs with these ids in one round trip, None for each one that does not exist."""
        return [r.job if r is not None else None for r in await self.store.get_many(job_ids)]

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

    # -- delete, list, watch --------------------------------------------------------------

    async def delete(self, name: str, *, caller: Identity) -> None:
        identity.require_write(caller, "DeleteJob")
        await self._visible(name, caller)
        status, state = await self.store.delete(names.JOB.parse_one(name))
        if status == "missing":
            raise errors.NotFound(f"{name} not found")
        if status == "not_terminal":
            raise errors.FailedPrecondition(f"{name} is {J.Name(state)}; only terminal jobs can be deleted")

    async def list(self, page_size: int, page_token: str, states, labels, experiment: str, tenant: str,
                   view: int = job_pb2.JOB_VIEW_UNSPECIFIED, *, caller: Identity):
        """A page of the jobs of `tenant` ('' = all, admins only; identity.list_filter) as caller
        may see them; an empty page when a member asks for another tenant's."""
        narrowed = identity.list_filter(caller, tenant)
        if narrowed is None:
            return [], ""
        tenant = narrowed
        size = paging.page_size(page_size)
        if view not in job_pb2.JobView.values():
            raise errors.InvalidArgument("view", f"unknown job view {view}")
        for i, state in enumerate(states):
            if state not in J.values() or state == J.JOB_STATE_UNSPECIFIED:
                raise errors.InvalidArgument(f"states[{i}]", f"unknown job state {state}")
        validation.validate_labels(labels, "labels")
        if experiment:
            names.EXPERIMENT.parse(experiment, "experiment")
        filters = {"states": list(states), "labels": dict(labels), "experiment": experiment, "tenant": tenant}
        after = paging.decode_page_token(page_token, filters, "ListJobs")
        jobs, last = await self.store.list_jobs(size, after, set(states), dict(labels), experiment, tenant,
                                                without_config=view == job_pb2.JOB_VIEW_BASIC)
        return [tenancy.shown(caller, j) for j in jobs], paging.encode_page_token(last, filters) if last else ""

    async def watch(self, name: str, after_sequence: int, poll_ms: int = 1000, *,
                    caller: Identity) -> AsyncIterator[job_pb2.JobEvent]:
        """Events after after_sequence, then new ones as they happen, until the terminal one."""
        await self._visible(name, caller)
        if after_sequence < 0:
            raise errors.InvalidArgument("after_sequence", "must be >= 0")
        job_id = names.JOB.parse_one(name)
        record = await self.record(name)
        first = await self.store.first_sequence(job_id)
        if after_sequence and first and after_sequence + 1 < first:
            raise errors.OutOfRange(
                f"after_sequence {after_sequence} is older than the kept history (oldest kept: {first})"
            )
        last = after_sequence
        if after_sequence >= record.seq and is_terminal(record.job.state):
            return
        while True:
            raise_if_cancelled()  # redis-py swallows it inside the blocking read
            events = await self.store.events_after(job_id, last, block_ms=poll_ms)
            for event in events:
                last = event.sequence
                yield event
                if event.WhichOneof("payload") == "state_change" and is_terminal(event.state_change.to_state):
                    return
            if not events and await self.store.get(job_id) is None:
                return  # deleted while watched


def _with_reason(job: job_pb2.Job, reason: str) -> job_pb2.Job:
    changed = job_pb2.Job()
    changed.CopyFrom(job)
    changed.state_reason = reason
    return changed
