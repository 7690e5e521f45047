"""Builders of scheduler protos shared by the scheduler's unit and integration tests."""

from __future__ import annotations

from google.protobuf import duration_pb2

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2


def make_job(entrypoint: str = "pkg.train:main", *, cpus: float = 1.0, gpus: float = 0.0, workers: int = 1,
             priority: int = 0, tenant: str = "", labels: dict | None = None, max_retries: int = 0,
             timeout_s: float | None = None, config: dict | None = None, backoff_s: float = 0.05) -> job_pb2.Job:
    job = job_pb2.Job(
        spec=common_pb2.TrainingSpec(
            entrypoint=entrypoint, num_workers=workers,
            resources_per_worker=common_pb2.Resources(num_cpus=cpus, num_gpus=gpus),
        ),
        priority=priority, tenant=tenant, labels=labels or {},
        retry_policy=common_pb2.RetryPolicy(
            max_retries=max_retries, initial_backoff=duration_pb2.Duration(nanos=int(backoff_s * 1e9)),
        ),
    )
    if config:
        job.spec.config.update(config)
    if timeout_s is not None:
        job.timeout.FromNanoseconds(int(timeout_s * 1e9))
    return job
