"""The trainer's run vocabulary as types: run states, failures, workers, and event payloads.

runs.py keeps these in memory and mirrors them to JSON files; convert.py turns them into
protos. Nothing reads a run record or event by string key: the JSON form exists only at the
file boundary (`to_json` / `from_json` here), in the layout earlier trainers wrote.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from paddleray.services.common import states
from paddleray.services.common.checkpoints import CheckpointInfo
from paddleray.trainer.v1 import run_pb2


class RunState(StrEnum):
    """The names follow trainer.v1.RunState without its prefix (convert.py maps them)."""

    UNSPECIFIED = "UNSPECIFIED"  # only as the "from" of a run's first state event
    PENDING = "PENDING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"
    TIMED_OUT = "TIMED_OUT"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset(RunState(run_pb2.RunState.Name(s).removeprefix("RUN_STATE_")) for s in states.RUN_TERMINAL)
_ENDED_BY_STOP = {RunState.STOPPED, RunState.TIMED_OUT, RunState.FAILED}
TRANSITIONS: dict[RunState, set[RunState]] = {
    RunState.PENDING: {RunState.STARTING, RunState.STOPPING, *_ENDED_BY_STOP},
    RunState.STARTING: {RunState.RUNNING, RunState.STOPPING, *_ENDED_BY_STOP},
    RunState.RUNNING: {RunState.STOPPING, RunState.SUCCEEDED, RunState.FAILED},
    # Once a stop was asked, the run ends as the stop says, even if user code failed meanwhile.
    RunState.STOPPING: {RunState.STOPPED, RunState.TIMED_OUT, RunState.FAILED},
}


class FailureKind(StrEnum):
    """common.v1.FailureKind without its prefix."""

    USER_CODE = "USER_CODE"
    WORKER_LOST = "WORKER_LOST"
    TRAINER_ERROR = "TRAINER_ERROR"
    TIMEOUT = "TIMEOUT"
    STOPPED = "STOPPED"
    PLACEMENT_IMPOSSIBLE = "PLACEMENT_IMPOSSIBLE"


# The contract bounds a failure's traceback (common.v1.Failure.traceback).
MAX_TRACEBACK_CHARS = 8192


@dataclass(frozen=True)
class Failure:
    kind: FailureKind
    message: str
    rank: int | None = None
    traceback: str = ""
    node_id: str = ""

    def __post_init__(self) -> None:
        if len(self.traceback) > MAX_TRACEBACK_CHARS:  # the innermost frames are at the end
            object.__setattr__(self, "traceback", self.traceback[-MAX_TRACEBACK_CHARS:])

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "message": self.message, "rank": self.rank, "traceback": self.traceback,
                "node_id": self.node_id}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Failure | None:
        if data is None:
            return None
        return cls(FailureKind(data["kind"]), data["message"], data.get("rank"), data.get("traceback", ""),
                   data.get("node_id", ""))


@dataclass(frozen=True)
class WorkerInfo:
    """One rank's actor as the trainer knows it (worker.py's info() plus what the group adds)."""

    node_id: str
    node_ip: str = ""
    gpu_ids: tuple[str, ...] = ()
    pid: int = 0
    local_rank: int = 0
    warm: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "node_ip": self.node_ip, "gpu_ids": list(self.gpu_ids), "pid": self.pid,
                "local_rank": self.local_rank, "warm": self.warm}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WorkerInfo:
        return cls(data["node_id"], data.get("node_ip", ""), tuple(data.get("gpu_ids", ())), data.get("pid", 0),
                   data.get("local_rank", 0), data.get("warm", False))


@dataclass(frozen=True)
class StateChange:
    from_state: RunState
    to_state: RunState
    reason: str
    failure: Failure | None = None


@dataclass(frozen=True)
class MetricsReport:
    step: int
    metrics: dict[str, float] = field(default_factory=dict)


# A checkpoint event's payload is the checkpoint as checkpoints.py reads it from disk.
Payload = StateChange | MetricsReport | CheckpointInfo


@dataclass(frozen=True)
class RunEvent:
    sequence: int
    time: float
    payload: Payload

    # -- the events.jsonl line: {"sequence", "time", "kind", "data"} -----------------------
    def to_json(self) -> dict[str, Any]:
        return {"sequence": self.sequence, "time": self.time, "kind": _kind(self.payload),
                "data": payload_to_json(self.payload)}

    @classmethod
    def from_json(cls, line: dict[str, Any]) -> RunEvent:
        return cls(int(line["sequence"]), float(line["time"]), payload_from_json(line["kind"], line["data"]))


def _kind(payload: Payload) -> str:
    if isinstance(payload, StateChange):
        return "state"
    return "metrics" if isinstance(payload, MetricsReport) else "checkpoint"


def payload_to_json(payload: Payload) -> dict[str, Any]:
    if isinstance(payload, StateChange):
        data: dict[str, Any] = {"from": payload.from_state.value, "to": payload.to_state.value,
                                "reason": payload.reason}
        if payload.failure is not None:
            data["failure"] = payload.failure.to_json()
        return data
    if isinstance(payload, MetricsReport):
        return {"step": payload.step, "metrics": dict(payload.metrics)}
    return checkpoint_to_json(payload)


def payload_from_json(kind: str, data: dict[str, Any]) -> Payload:
    if kind == "state":
        return StateChange(RunState(data["from"]), RunState(data["to"]), data["reason"],
                           Failure.from_json(data.get("failure")))
    if kind == "metrics":
        return MetricsReport(int(data["step"]), dict(data["metrics"]))
    if kind == "checkpoint":
        return checkpoint_from_json(data)
    raise ValueError(f"unknown event kind {kind!r}")


def checkpoint_to_json(checkpoint: CheckpointInfo) -> dict[str, Any]:
    return {**checkpoint.manifest(), "path": str(checkpoint.path)}


def checkpoint_from_json(data: dict[str, Any]) -> CheckpointInfo:
    return CheckpointInfo(Path(data["path"]), int(data["step"]), int(data["epoch"]), dict(data["metrics"]),
                          float(data["create_time"]))
