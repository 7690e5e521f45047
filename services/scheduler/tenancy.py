"""Tenant enforcement for the scheduler's RPCs, kept apart from the job and experiment domains.

The servicers call these around JobManager / ExperimentManager calls with the call's caller,
which they read once (identity.of_call()) and also pass to the create calls (caller=); the rules
themselves are common.identity's. A job's tenant is Job.tenant;
an experiment's is its trial_template.tenant, which every trial inherits, so a sweep's trials are
its tenant's jobs.
"""

from __future__ import annotations

from paddleray.scheduler.v1 import experiment_pb2, job_pb2
from paddleray.services.common import idempotency, identity
from paddleray.services.common.identity import Identity
from paddleray.services.scheduler.experiments import ExperimentManager
from paddleray.services.scheduler.jobs import JobManager


def prepare_job(caller: Identity, job: job_pb2.Job | None) -> str:
    """Before CreateJob: refuses read-only callers and sets the job's tenant from the credential."""
    identity.require_write(caller, "CreateJob")
    if job is None:
        return caller.tenant
    job.tenant = identity.tenant_for_write(caller, job.tenant, "job.tenant")
    return job.tenant


def prepare_experiment(caller: Identity, experiment: experiment_pb2.Experiment | None) -> str:
    identity.require_write(caller, "CreateExperiment")
    if experiment is None:
        return caller.tenant
    template = experiment.trial_template
    template.tenant = identity.tenant_for_write(caller, template.tenant, "experiment.trial_template.tenant")
    return template.tenant


def check_created(tenant: str, created_tenant: str) -> None:
    """A repeated request_id returns the resource first created with it; when that one is
    another tenant's, the key is taken (common/idempotency.py), and nothing of the other
    resource is shown. (The fingerprint holds the tenant; this covers resources stored without one.)"""
    if created_tenant != tenant:
        raise idempotency.reused()


def shown(caller: Identity, job: job_pb2.Job) -> job_pb2.Job:
    """The job as the caller may see it: init_from.resolved_uri (a path in the shared storage
    root) only for admins; members see the source they named."""
    if not job.spec.init_from.resolved_uri or caller.is_admin:
        return job
    copy = job_pb2.Job()
    copy.CopyFrom(job)
    copy.spec.init_from.ClearField("resolved_uri")
    return copy


async def visible_job(caller: Identity, manager: JobManager, name: str) -> job_pb2.Job:
    """The job, or NOT_FOUND (as for a missing job) when the caller may not see its tenant."""
    job = await manager.get(name)
    identity.check_visible(caller, job.tenant, name)
    return job


async def writable_job(caller: Identity, manager: JobManager, name: str, action: str) -> job_pb2.Job:
    identity.require_write(caller, action)
    return await visible_job(caller, manager, name)


def experiment_tenant(experiment: experiment_pb2.Experiment) -> str:
    return experiment.trial_template.tenant or identity.DEFAULT_TENANT


async def visible_experiment(caller: Identity, experiments: ExperimentManager, name: str) -> experiment_pb2.Experiment:
    experiment = await experiments.get(name)
    identity.check_visible(caller, experiment_tenant(experiment), name)
    return experiment


async def writable_experiment(caller: Identity, experiments: ExperimentManager, name: str,
                              action: str) -> experiment_pb2.Experiment:
    identity.require_write(caller, action)
    return await visible_experiment(caller, experiments, name)


def visible_experiments(caller: Identity, page: list[experiment_pb2.Experiment]) -> list[experiment_pb2.Experiment]:
    """The caller's share of a page of experiments (the store has no tenant index for them:
    a page may hold fewer than page_size, which AIP-158 allows; the next token still pages on)."""
    return [e for e in page if identity.visible(caller, experiment_tenant(e))]
