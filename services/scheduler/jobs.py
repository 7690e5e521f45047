"""Jobs as a domain: JobManager, the one entry point, and the creation path (CreateJob, a sweep's
trials) and deletion.

JobManager is the reads of job_reads.py and the state machine of job_transitions.py (its rules
in job_states.py) with creation and deletion added: every entry point (servicer, dispatcher,
experiments) calls it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from typing import Protocol

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2
from paddleray.services.common import errors, idempotency, identity, names
from paddleray.services.common.identity import Identity
from paddleray.services.scheduler import tenancy, validation
from paddleray.services.scheduler.hooks import JobHooks
from paddleray.services.scheduler.job_states import J, now_ts, state_event
from paddleray.services.scheduler.job_transitions import JobTransitions, RunStopper
from paddleray.services.scheduler.store import JobStore


class SpecPreparer(Protocol):
    """Checks what a spec names outside the job (package, init_from) with caller's rights and
    returns the spec to store; field is the prefix for errors (JobInputs.prepare)."""

    def __call__(self, spec: common_pb2.TrainingSpec, field: str, *,
                 caller: Identity) -> Awaitable[common_pb2.TrainingSpec]: ...


async def _as_is(spec: common_pb2.TrainingSpec, field: str, *, caller: Identity) -> common_pb2.TrainingSpec:
    return spec

class JobManager(JobTransitions):
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

    # -- delete -------------------------------------------------------------------------------

    async def delete(self, name: str, *, caller: Identity) -> None:
        identity.require_write(caller, "DeleteJob")
        await self._visible(name, caller)
        status, state = await self.store.delete(names.JOB.parse_one(name))
        if status == "missing":
            raise errors.NotFound(f"{name} not found")
        if status == "not_terminal":
            raise errors.FailedPrecondition(f"{name} is {J.Name(state)}; only terminal jobs can be deleted")
