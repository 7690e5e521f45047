"""Every Redis key the scheduler uses, built in one place (python-rq's convention).

All keys share one prefix so that a scheduler can share a Redis with other programs, and so
that tests can assert on exactly the keys a call wrote.
"""

from __future__ import annotations

PREFIX = "paddleray:sched:"


def job(job_id: str) -> str:
    """Hash: the serialized Job proto plus the index fields Lua scripts check (see store.py)."""
    return f"{PREFIX}job:{job_id}"


def events(job_id: str) -> str:
    """Stream of the job's events; entry id "<sequence>-1" carries the sequence number."""
    return f"{PREFIX}events:{job_id}"


def request(request_id: str) -> str:
    """String: job id created by this CreateJob request_id (expires after 24 hours)."""
    return f"{PREFIX}request:{request_id}"


def by_time() -> str:
    """Sorted set (all scores 0) of "<create_ms>:<job_id>" members: the ListJobs order."""
    return f"{PREFIX}index:time"


def by_tenant(tenant: str) -> str:
    return f"{PREFIX}index:tenant:{tenant}"


def by_experiment(experiment: str) -> str:
    return f"{PREFIX}index:experiment:{experiment}"


def state_set(state: int) -> str:
    """Set of job ids currently in one JobState (by number)."""
    return f"{PREFIX}state:{state}"


def queue() -> str:
    """Sorted set of job ids waiting for dispatch, scored by effective priority (lower first)."""
    return f"{PREFIX}queue"


def delayed() -> str:
    """Sorted set of RETRYING job ids scored by the epoch ms their backoff ends."""
    return f"{PREFIX}delayed"


def leases() -> str:
    """Sorted set of dispatched job ids scored by the epoch ms their owner's lease expires."""
    return f"{PREFIX}leases"


def reserved() -> str:
    """Hash of cluster resources held by STARTING/RUNNING jobs: cpu_m, gpu_m (milli), mem."""
    return f"{PREFIX}reserved"


def tenant_usage(tenant: str) -> str:
    """Hash of a tenant's STARTING/RUNNING jobs: jobs (count) and gpu_m (milli GPUs)."""
    return f"{PREFIX}tenant:{tenant}"


def job_prefix() -> str:
    """For Lua scripts that reach a job through a request key (the job id is read, not known)."""
    return f"{PREFIX}job:"
