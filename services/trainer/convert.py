"""Trainer domain records <-> trainer.v1 protos (the servicer's only translation layer)."""

from __future__ import annotations

import logging
from typing import cast

from google.protobuf import duration_pb2, timestamp_pb2

from paddleray.common.v1 import common_pb2
from paddleray.services.common import errors, training_spec
from paddleray.services.common.checkpoints import CheckpointInfo
from paddleray.services.trainer import runs
from paddleray.services.trainer.logs import LogLine
from paddleray.services.trainer.records import (
    Failure,
    MetricsReport,
    RunEvent,
    RunState,
    StateChange,
)
from paddleray.services.trainer.trainer import ClusterResources, Resources
from paddleray.trainer.v1 import run_pb2, trainer_service_pb2

log = logging.getLogger(__name__)
# Runs already reported as unshowable (reported once, not at every list).
_unshowable: set[str] = set()
_STREAMS = {"stdout": common_pb2.LOG_STREAM_STDOUT, "stderr": common_pb2.LOG_STREAM_STDERR}


def state_to_proto(state: RunState) -> run_pb2.RunState:
    return cast(run_pb2.RunState, run_pb2.RunState.Value(f"RUN_STATE_{state.value}"))


def state_from_proto(value: int) -> RunState:
    # Proto3 enums are open: a newer client may send a number this build does not know.
    if value not in run_pb2.RunState.values() or value == run_pb2.RUN_STATE_UNSPECIFIED:
        raise errors.InvalidArgument("states", f"{value} is not a run state")
    return RunState(run_pb2.RunState.Name(value).removeprefix("RUN_STATE_"))


def timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def duration_seconds(duration: duration_pb2.Duration, field: str) -> float:
    """A request's Duration in seconds; INVALID_ARGUMENT naming field when out of its range."""
    return training_spec.duration_seconds(duration, field, training_spec.MAX_TIMEOUT_S)


def checkpoint(record: CheckpointInfo) -> common_pb2.Checkpoint:
    return common_pb2.Checkpoint(
        uri=str(record.path), step=record.step, epoch=record.epoch, metrics=record.metrics,
        create_time=timestamp(record.create_time),
    )


def failure(value: Failure) -> common_pb2.Failure:
    message = common_pb2.Failure(
        kind=cast(common_pb2.FailureKind, common_pb2.FailureKind.Value(f"FAILURE_KIND_{value.kind.value}")),
        message=value.message,
        traceback=value.traceback,
        node_id=value.node_id,
    )
    if value.rank is not None:
        message.rank = value.rank
    return message


def run(record: runs.RunRecord) -> run_pb2.Run:
    message = run_pb2.Run(
        name=record.name,
        spec=record.spec,
        job=record.job,
        state=state_to_proto(record.state),
        state_reason=record.state_reason,
        labels=record.labels,
        tenant=record.tenant,
        create_time=timestamp(record.create_time),
        workers=[
            run_pb2.Worker(
                rank=rank, local_rank=w.local_rank, node_id=w.node_id, gpu_ids=list(w.gpu_ids), warm=w.warm
            )
            for rank, w in enumerate(record.workers)
        ],
    )
    if record.timeout_s is not None:
        message.timeout.FromNanoseconds(int(record.timeout_s * 1e9))
    if record.resume_from is not None:
        message.resume_from.CopyFrom(record.resume_from)
    if record.failure is not None:
        message.failure.CopyFrom(failure(record.failure))
    if record.latest_metrics is not None:
        message.latest_metrics.CopyFrom(metrics_report(record.latest_metrics))
    if record.latest_checkpoint is not None:
        message.latest_checkpoint.CopyFrom(checkpoint(record.latest_checkpoint))
    if record.best_checkpoint is not None:
        message.best_checkpoint.CopyFrom(checkpoint(record.best_checkpoint))
    if record.start_time is not None:
        message.start_time.CopyFrom(timestamp(record.start_time))
    if record.end_time is not None:
        message.end_time.CopyFrom(timestamp(record.end_time))
    return message


def runs_shown(records: list[runs.RunRecord]) -> list[run_pb2.Run]:
    """The records as Runs, leaving out (with one log line per record) any that cannot be
    shown: one bad stored record must not make a list fail for everyone."""
    shown = []
    for record in records:
        try:
            shown.append(run(record))
        except (ValueError, OverflowError, TypeError) as exc:
            if record.run_id not in _unshowable:
                _unshowable.add(record.run_id)
                log.warning("run %s cannot be shown and is left out of lists: %s", record.run_id, exc)
    return shown


def metrics_report(report: MetricsReport) -> common_pb2.MetricsReport:
    return common_pb2.MetricsReport(step=report.step, metrics=report.metrics)


def event(e: RunEvent) -> run_pb2.RunEvent:
    message = run_pb2.RunEvent(sequence=e.sequence, time=timestamp(e.time))
    payload = e.payload
    if isinstance(payload, StateChange):
        change = run_pb2.RunStateChange(
            from_state=state_to_proto(payload.from_state), to_state=state_to_proto(payload.to_state),
            reason=payload.reason,
        )
        if payload.failure is not None:
            change.failure.CopyFrom(failure(payload.failure))
        message.state_change.CopyFrom(change)
    elif isinstance(payload, MetricsReport):
        message.metrics.CopyFrom(metrics_report(payload))
    else:
        message.checkpoint.CopyFrom(checkpoint(payload))
    return message


def log_line(line: LogLine) -> common_pb2.LogLine:
    return common_pb2.LogLine(rank=line.rank, stream=_STREAMS[line.stream], text=line.text, time=timestamp(line.time))


def resources(amounts: Resources) -> run_pb2.ResourceAmounts:
    return run_pb2.ResourceAmounts(
        num_cpus=amounts.num_cpus, num_gpus=amounts.num_gpus, memory_bytes=amounts.memory_bytes, custom=amounts.custom
    )


def cluster(resources_: ClusterResources) -> trainer_service_pb2.GetClusterResourcesResponse:
    return trainer_service_pb2.GetClusterResourcesResponse(
        total=resources(resources_.total),
        available=resources(resources_.available),
        nodes=[
            run_pb2.NodeResources(
                node_id=n.node_id, address=n.address, total=resources(n.total), available=resources(n.available)
            )
            for n in resources_.nodes
        ],
    )
