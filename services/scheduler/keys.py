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


def parked() -> str:
    """Sorted set of queued job ids the cluster cannot hold even when empty, scored as in the
    queue: kept out of the queue so that any number of them cost a dispatch pass nothing; they
    go back into the queue when the cluster's shape changes so that they may fit."""
    return f"{PREFIX}parked"


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
    """For the Lua scripts that reach a job by an id they read (through a request key, or from
    the delayed set), which no caller can name beforehand; single-node Redis only."""
    return f"{PREFIX}job:"


# -- Experiments (sweeps): experiments.py, experiment_trials.py, experiment_store.py, asha.py -


def experiment(experiment_id: str) -> str:
    """Hash: the serialized Experiment plus its changing fields (see experiment_store.py)."""
    return f"{PREFIX}exp:{experiment_id}"


def experiment_prefix() -> str:
    """For the Lua script that reaches an experiment through a request key (see job_prefix)."""
    return f"{PREFIX}exp:"


def experiment_plan(experiment_id: str) -> str:
    """Hash: trial index -> the trial's parameters as JSON; written once, at creation."""
    return f"{PREFIX}exp-plan:{experiment_id}"


def experiment_trials(experiment_id: str) -> str:
    """Hash: trial index -> trial job id, once the trial's job exists."""
    return f"{PREFIX}exp-trials:{experiment_id}"


def experiment_active(experiment_id: str) -> str:
    """Set of trial indexes handed out and not yet seen terminal (max_concurrent_trials)."""
    return f"{PREFIX}exp-active:{experiment_id}"


def experiment_best(experiment_id: str) -> str:
    """Hash: trial index -> the trial's best sign * metric (larger is better)."""
    return f"{PREFIX}exp-best:{experiment_id}"


def experiment_best_checkpoints(experiment_id: str) -> str:
    """Hash: trial index -> its best checkpoint by the experiment's metric (serialized), and
    "<index>:value" -> that checkpoint's sign * metric; kept as checkpoints are reported."""
    return f"{PREFIX}exp-best-ckpt:{experiment_id}"


def asha_rungs(experiment_id: str) -> str:
    """Hash: "milestone|trial index" -> sign * metric recorded at that ASHA rung."""
    return f"{PREFIX}exp-asha-rungs:{experiment_id}"


def asha_stopped(experiment_id: str) -> str:
    """Hash: trial index -> reason ASHA stopped it (decisions are kept so replays agree)."""
    return f"{PREFIX}exp-asha-stopped:{experiment_id}"


def experiment_request(request_id: str) -> str:
    """String: experiment id created by this CreateExperiment request_id (expires after 24 hours)."""
    return f"{PREFIX}exp-request:{request_id}"


def experiments_by_time() -> str:
    """Sorted set (all scores 0) of "<create_ms>:<experiment_id>": the ListExperiments order."""
    return f"{PREFIX}index:experiments"


def experiment_state_set(state: int) -> str:
    """Set of experiment ids in one ExperimentState (by number)."""
    return f"{PREFIX}exp-state:{state}"


def trial_owner() -> str:
    """Hash: trial job id -> "experiment_id/index", written when the index is handed out."""
    return f"{PREFIX}trial-owner"
