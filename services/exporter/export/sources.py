"""Runs in: the exporter process.

Where an export's weights come from: a job's best checkpoint (else its newest), or a checkpoint.

Jobs are read from the scheduler over gRPC. The best checkpoint is ranked by the job's own
checkpoint policy (best_metric / best_mode) over the checkpoint directories of its attempts,
which the trainer's retention keeps it in; a job without a best_metric exports its newest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc import aio

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2, job_service_pb2_grpc
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.services.common import errors, structs
from paddleray.services.common.checkpoints import CheckpointInfo, RetentionPolicy, checkpoint_store, read_checkpoint
from paddleray.services.common.peers import PeerSettings
from paddleray.services.common.storage import is_uri
from paddleray.services.exporter.export.export_spec import runtime_env


@dataclass(frozen=True)
class Source:
    checkpoint: common_pb2.Checkpoint
    job: str = ""
    job_metrics: dict[str, float] = field(default_factory=dict)
    # Defaults the job gives the export: its entrypoint's module, config and environment.
    entrypoint: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    runtime_env: dict[str, Any] = field(default_factory=dict)


class SchedulerJobs:
    """Reads jobs from the scheduler (as configured: token, TLS); without an address, refuses
    exports from a job. Must be created on the event loop that uses it."""

    def __init__(self, scheduler: PeerSettings) -> None:
        self.address = scheduler.address
        self.channel = scheduler.dial() if scheduler.address else None
        self.stub = job_service_pb2_grpc.JobServiceStub(self.channel) if self.channel else None
        self.timeout = scheduler.rpc_timeout_s

    async def get(self, name: str) -> job_pb2.Job:
        if self.stub is None:
            raise errors.FailedPrecondition("job: the exporter has no scheduler_address configured; export a checkpoint_uri")
        try:
            response = await self.stub.GetJob(js.GetJobRequest(name=name), timeout=self.timeout)
        except aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                raise errors.NotFound(f"job: {name} does not exist") from exc
            raise errors.Unavailable(f"the scheduler ({self.address}) could not be reached: {exc.code().name}") from exc
        return response.job

    async def close(self) -> None:
        if self.channel is not None:
            await self.channel.close()


def from_job(job: job_pb2.Job) -> Source:
    if not job.HasField("latest_checkpoint") or not job.latest_checkpoint.uri:
        raise errors.FailedPrecondition(f"job: {job.name} has no checkpoint yet")
    checkpoint = best_checkpoint(job) or job.latest_checkpoint
    if read_checkpoint(checkpoint.uri) is None:
        raise errors.NotFound(f"job: the checkpoint of {job.name} ({checkpoint.uri}) is gone from storage")
    return Source(
        checkpoint=checkpoint,
        job=job.name,
        job_metrics=dict(job.latest_metrics.metrics),
        entrypoint=job.spec.entrypoint,
        config=structs.to_python(job.spec.config),  # as the trainer gives it: 64, not 64.0
        runtime_env=runtime_env(job.spec.runtime_env, "job.spec.runtime_env"),
    )


def from_checkpoint(directory: str) -> Source:
    info = read_checkpoint(directory)
    if info is None:
        raise errors.NotFound(f"checkpoint_uri: {directory} is not a complete checkpoint")
    return Source(checkpoint=_proto(info))


def best_checkpoint(job: job_pb2.Job) -> common_pb2.Checkpoint | None:
    policy = job.spec.checkpoint_policy
    if not policy.best_metric:
        return None
    retention = RetentionPolicy(best_metric=policy.best_metric,
                                best_mode="min" if policy.best_mode == common_pb2.METRIC_MODE_MIN else "max")
    # Each attempt is its own trainer run with its own checkpoints directory.
    directories = {_parent(job.latest_checkpoint.uri)}
    directories |= {_parent(a.resumed_from.uri) for a in job.attempts if a.resumed_from.uri}
    candidates = [best for d in sorted(directories) if (best := checkpoint_store(d).best(retention)) is not None]
    if not candidates:
        return None
    return _proto(min(candidates, key=retention.rank_key))


def _parent(uri: str) -> str:
    """The checkpoints directory of a checkpoint: a path's parent, or a URI's (s3://.../checkpoints)."""
    return uri.rstrip("/").rsplit("/", 1)[0] if is_uri(uri) else str(Path(uri).parent)


def _proto(info: CheckpointInfo) -> common_pb2.Checkpoint:
    checkpoint = common_pb2.Checkpoint(uri=str(info.path), step=info.step, epoch=info.epoch, metrics=info.metrics)
    checkpoint.create_time.FromNanoseconds(int(info.create_time * 1e9))
    return checkpoint
