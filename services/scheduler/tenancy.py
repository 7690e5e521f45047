"""Tenant enforcement for the scheduler's RPCs, kept apart from the job and experiment domains.

The servicers call these around JobManager / ExperimentManager calls; the rules themselves
are common.identity's. A job's tenant is Job.tenant; an experiment's is its
trial_template.tenant, which every trial inherits, so a sweep's trials are its tenant's jobs.
"""

from __future__ import annotations

from paddleray.scheduler.v1 import experiment_pb2, job_pb2
from paddleray.services.common import errors, identity
from paddleray.services.scheduler.experiments import ExperimentManager
from paddleray.services.scheduler.jobs import JobManager


def prepare_job(job: job_pb2.Job | None) -> str:
    """Before CreateJob: refuses read-only callers and sets the job's tenant from the credential."""
    identity.require_write("CreateJob")
    if job is None:
        return identity.current().tenant
    job.tenant = identity.tenant_for_write(job.tenant, "job.tenant")
    return job.tenant


def prepare_experiment(experiment: experiment_pb2.Experiment | None) -> str:
    identity.require_write("CreateExperiment")
    if experiment is None:
        return identity.current().tenant
    template = experiment.trial_template
    template.tenant = identity.tenant_for_write(template.tenant, "experiment.trial_template.tenant")
    return template.tenant


def check_created(tenant: str, created_tenant: str) -> None:
    """A repeated request_id returns the resource first created with it; when that one is
    another tenant's, the key is taken, and nothing of the other resource is shown."""
    if created_tenant != tenant:
        raise errors.AlreadyExists("request_id: already used by another request")


async def visible_job(manager: JobManager, name: str) -> job_pb2.Job:
    """The job, or NOT_FOUND (as for a missing job) when the caller may not see its tenant."""
    job = await manager.get(name)
    identity.check_visible(job.tenant, name)
    return job


async def writable_job(manager: JobManager, name: str, action: str) -> job_pb2.Job:
    identity.require_write(action)
    return await visible_job(manager, name)


def experiment_tenant(experiment: experiment_pb2.Experiment) -> str:
    return experiment.trial_template.tenant or identity.DEFAULT_TENANT


async def visible_experiment(experiments: ExperimentManager, name: str) -> experiment_pb2.Experiment:
    experiment = await experiments.get(name)
    identity.check_visible(experiment_tenant(experiment), name)
    return experiment


async def writable_experiment(experiments: ExperimentManager, name: str, action: str) -> experiment_pb2.Experiment:
    identity.require_write(action)
    return await visible_experiment(experiments, name)


def visible_experiments(page: list[experiment_pb2.Experiment]) -> list[experiment_pb2.Experiment]:
    """The caller's share of a page of experiments (the store has no tenant index for them:
    a page may hold fewer than page_size, which AIP-158 allows; the next token still pages on)."""
    return [e for e in page if identity.visible(experiment_tenant(e))]
