"""The scheduler's tenant rules for jobs and experiments, applied by the domain.

JobManager and ExperimentManager call these (and common.identity's rules) with the caller their
own callers pass as an argument named `caller`; no servicer calls them (the servicers only read
the call's caller with identity.of_call() and pass it: tests/unit/test_tenancy_layer.py). They
are a module of their own rather than methods of the managers because both managers share them.

A job's tenant is Job.tenant; an experiment's is its trial_template.tenant, which every trial
inherits, so a sweep's trials are its tenant's jobs.
"""

from __future__ import annotations

from paddleray.scheduler.v1 import experiment_pb2, job_pb2
from paddleray.services.common import idempotency, identity
from paddleray.services.common.identity import Identity


def prepare_job(caller: Identity, job: job_pb2.Job | None) -> str:
    """Before CreateJob: refuses read-only callers and sets the job's tenant from the credential."""
    identity.require_write(caller, "CreateJob")
    if job is None:
        return caller.tenant
    job.tenant = identity.tenant_for_write(caller, job.tenant, "job.tenant")
    return job.tenant


def prepare_experiment(caller: Identity, experiment: experiment_pb2.Experiment | None) -> str:
    identity.require_write(caller, "CreateExperiment")
    if experiment is None or not experiment.HasField("trial_template"):
        # Setting the tenant would make an absent template present (and validation then name
        # its spec instead of the template that is missing).
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


def experiment_tenant(experiment: experiment_pb2.Experiment) -> str:
    return experiment.trial_template.tenant or identity.DEFAULT_TENANT


def visible_experiments(caller: Identity, page: list[experiment_pb2.Experiment]) -> list[experiment_pb2.Experiment]:
    """The caller's share of a page of experiments (the store has no tenant index for them:
    a page may hold fewer than page_size, which AIP-158 allows; the next token still pages on)."""
    return [e for e in page if identity.visible(caller, experiment_tenant(e))]
