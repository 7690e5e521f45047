"""Run registry: records, the state machine, and each run's numbered event log.

State lives in memory on the service's event loop (one writer, no locks) and is mirrored to
`runs/<id>/run.json` and `runs/<id>/events.jsonl` under the storage root, so a restarted
trainer still answers GetRun/ListRuns/WatchRun for earlier runs. Runs that were active when
the trainer went away are marked FAILED on load: their actors died with the old driver.
Only active runs keep their events in memory; a run that ended (a long one may have reported
millions of metrics) is read back from its events.jsonl, so memory does not grow with history.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import shutil
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from paddleray.common.v1 import common_pb2
from paddleray.services.common import errors, names, training_spec
from paddleray.services.common.checkpoints import (
    CheckpointInfo,
    CheckpointStore,
    ObjectCheckpointStore,
    RetentionPolicy,
    checkpoint_store,
)
from paddleray.services.trainer import metrics
from paddleray.services.trainer.context import RunPaths
from paddleray.services.trainer.records import (
    TRANSITIONS,
    Failure,
    FailureKind,
    MetricsReport,
    Payload,
    RunEvent,
    RunState,
    StateChange,
    WorkerInfo,
    checkpoint_from_json,
    checkpoint_to_json,
)
from paddleray.services.trainer.spec import retention_policy

log = logging.getLogger(__name__)


@dataclass
class RunRecord:
    run_id: str
    spec: common_pb2.TrainingSpec  # as given to StartRun
    job: str = ""
    request_id: str = ""
    timeout_s: float | None = None
    resume_from: common_pb2.Checkpoint | None = None
    labels: dict[str, str] = field(default_factory=dict)
    tenant: str = "default"  # records written before runs had tenants are the default tenant's
    request_fp: str = ""  # of the StartRun that created it with a request_id (common/idempotency.py)
    state: RunState = RunState.PENDING
    state_reason: str = ""
    failure: Failure | None = None
    workers: list[WorkerInfo] = field(default_factory=list)
    latest_metrics: MetricsReport | None = None
    latest_checkpoint: CheckpointInfo | None = None
    best_checkpoint: CheckpointInfo | None = None
    create_time: float = field(default_factory=time.time)
    start_time: float | None = None
    end_time: float | None = None

    @property
    def name(self) -> str:
        return names.RUN.format(run=self.run_id)

    @property
    def terminal(self) -> bool:
        return self.state.terminal

    @property
    def world_size(self) -> int:
        return self.spec.num_workers or 1

    # -- run.json: the spec and checkpoints in proto JSON, the rest as plain fields --------
    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "spec": json_format.MessageToDict(self.spec), "job": self.job,
            "request_id": self.request_id, "timeout_s": self.timeout_s,
            "resume_from": json_format.MessageToDict(self.resume_from) if self.resume_from is not None else None,
            "labels": dict(self.labels), "tenant": self.tenant, "request_fp": self.request_fp,
            "state": self.state.value,
            "state_reason": self.state_reason,
            "failure": self.failure.to_json() if self.failure is not None else None,
            "workers": [w.to_json() for w in self.workers],
            "latest_metrics": (
                {"step": self.latest_metrics.step, "metrics": dict(self.latest_metrics.metrics)}
                if self.latest_metrics is not None else None
            ),
            "latest_checkpoint": _checkpoint_json(self.latest_checkpoint),
            "best_checkpoint": _checkpoint_json(self.best_checkpoint),
            "create_time": self.create_time, "start_time": self.start_time, "end_time": self.end_time,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        resume = data.get("resume_from")
        latest_metrics = data.get("latest_metrics")
        return cls(
            run_id=data["run_id"],
            spec=json_format.ParseDict(data["spec"], common_pb2.TrainingSpec()),
            job=data.get("job", ""),
            request_id=data.get("request_id", ""),
            timeout_s=_timeout(data.get("timeout_s")),
            resume_from=json_format.ParseDict(resume, common_pb2.Checkpoint()) if resume is not None else None,
            labels=dict(data.get("labels", {})),
            tenant=data.get("tenant") or "default",
            request_fp=data.get("request_fp", ""),
            state=RunState(data["state"]),
            state_reason=data.get("state_reason", ""),
            failure=Failure.from_json(data.get("failure")),
            workers=[WorkerInfo.from_json(w) for w in data.get("workers", [])],
            latest_metrics=(
                MetricsReport(int(latest_metrics["step"]), dict(latest_metrics["metrics"]))
                if latest_metrics is not None else None
            ),
            latest_checkpoint=_checkpoint_record(data.get("latest_checkpoint")),
            best_checkpoint=_checkpoint_record(data.get("best_checkpoint")),
            create_time=float(data["create_time"]),
            start_time=data.get("start_time"),
            end_time=data.get("end_time"),
        )


def _timeout(value: Any) -> float | None:
    """A stored timeout, or ValueError when it is not one a Run can show (a record written
    before StartRun bounded timeouts held 2**63 s, and broke every ListRuns)."""
    if value is None:
        return None
    seconds = float(value)
    if not (math.isfinite(seconds) and 0 < seconds <= training_spec.MAX_TIMEOUT_S):
        raise ValueError(f"timeout_s {value!r} is not a timeout a run can have")
    return seconds


def _checkpoint_json(checkpoint: CheckpointInfo | None) -> dict[str, Any] | None:
    return checkpoint_to_json(checkpoint) if checkpoint is not None else None


def _checkpoint_record(data: dict[str, Any] | None) -> CheckpointInfo | None:
    return checkpoint_from_json(data) if data is not None else None


class RunRegistry:
    def __init__(self, records_root: Path, storage_root: Path | str | None = None) -> None:
        """Records under records_root/runs; checkpoints under storage_root (a directory or a
        URI; records_root when not given, where both were always kept on a directory root)."""
        self._dir = Path(records_root) / "runs"
        self._storage_root = records_root if storage_root is None else storage_root
        self._runs: dict[str, RunRecord] = {}
        self._events: dict[str, list[RunEvent]] = {}  # active runs only
        self._changed: dict[str, asyncio.Event] = {}
        self._by_request: dict[str, str] = {}

    # --- reading -----------------------------------------------------------------------
    def get(self, run_id: str) -> RunRecord:
        try:
            return self._runs[run_id]
        except KeyError:
            raise errors.NotFound(f"{names.RUN.format(run=run_id)} not found") from None

    def by_request_id(self, request_id: str) -> RunRecord | None:
        run_id = self._by_request.get(request_id)
        return self._runs.get(run_id) if run_id else None

    def all(self) -> list[RunRecord]:
        return list(self._runs.values())

    def events(self, run_id: str, after: int = 0) -> list[RunEvent]:
        self.get(run_id)
        if (events := self._events.get(run_id)) is not None:
            return events[after:]  # sequences are 1..n, so index == sequence - 1
        return [e for e in self._read_events(run_id) if e.sequence > after]

    async def watch(self, run_id: str, after: int = 0) -> AsyncIterator[RunEvent]:
        """Events after `after`, then new ones as they come; ends after the terminal state."""
        while True:
            changed = self._changed[run_id]
            ended = self.get(run_id).terminal  # before reading: then nothing can follow what is read
            if run_id in self._events:
                pending = self.events(run_id, after)
            else:  # an ended run's events come from its file: read off the event loop
                pending = await asyncio.to_thread(self.events, run_id, after)
            for event in pending:
                yield event
                after = event.sequence
            if ended:
                return
            if not pending:
                await changed.wait()

    # --- writing -----------------------------------------------------------------------
    def add(self, record: RunRecord) -> RunRecord:
        if record.run_id in self._runs:
            raise errors.AlreadyExists(f"{record.name} already exists")
        self._runs[record.run_id] = record
        self._events[record.run_id] = []
        self._changed[record.run_id] = asyncio.Event()
        if record.request_id:
            self._by_request[record.request_id] = record.run_id
        self._emit(record, StateChange(RunState.UNSPECIFIED, record.state, "accepted"))
        metrics.RUNS_BY_STATE.labels(state=record.state).inc()
        return record

    def transition(self, run_id: str, state: RunState, reason: str = "", failure: Failure | None = None) -> bool:
        """Moves a run to `state`; False (and no change) when the state machine forbids it.

        `failure` says what ended a run that did not succeed; it is kept on the record and
        carried by the state event."""
        record = self.get(run_id)
        if state not in TRANSITIONS.get(record.state, ()):
            return False
        previous, record.state, record.state_reason = record.state, state, reason
        now = time.time()
        if state == RunState.RUNNING:
            record.start_time = now
        if state.terminal:
            record.end_time = now
            record.failure = failure
        metrics.RUNS_BY_STATE.labels(state=previous).dec()
        metrics.RUNS_BY_STATE.labels(state=state).inc()
        self._emit(record, StateChange(previous, state, reason, failure if state.terminal else None))
        log.info("run %s: %s -> %s %s", run_id, previous, state, reason)
        return True

    def explain(self, run_id: str, state: RunState, reason: str) -> None:
        """Updates why a run is still in `state` (no event: the state did not change)."""
        record = self.get(run_id)
        if record.state == state and record.state_reason != reason:
            record.state_reason = reason
            self._save(record)

    def set_workers(self, run_id: str, workers: list[WorkerInfo]) -> None:
        record = self.get(run_id)
        record.workers = workers
        self._save(record)

    def add_metrics(self, run_id: str, step: int, values: dict[str, float]) -> None:
        record = self.get(run_id)
        record.latest_metrics = MetricsReport(step, dict(values))
        self._emit(record, record.latest_metrics)

    def add_checkpoint(self, run_id: str, info: CheckpointInfo, best: CheckpointInfo | None) -> None:
        record = self.get(run_id)
        record.latest_checkpoint = info
        record.best_checkpoint = best
        self._emit(record, record.latest_checkpoint)

    def recover_checkpoint(self, run_id: str, store: CheckpointStore | ObjectCheckpointStore, policy: RetentionPolicy) -> None:
        """Records the newest checkpoint on disk if its report never arrived.

        ctx.report returns without waiting for the trainer: its checkpoint is committed on disk
        first, with the report's step and metrics in the manifest, so a report lost with its
        worker (or with a previous trainer) is rebuilt from there, metrics event included.
        Reports arrive in order, so when the newest checkpoint is unknown, so are its metrics.
        """
        latest = store.latest()
        record = self.get(run_id)
        known = record.latest_checkpoint
        if latest is None or (known is not None and known.path == latest.path):
            return
        if record.latest_metrics is None or record.latest_metrics.step <= latest.step:
            self.add_metrics(run_id, latest.step, dict(latest.metrics))
        self.add_checkpoint(run_id, latest, store.best(policy))

    def _emit(self, record: RunRecord, payload: Payload) -> None:
        events = self._events.get(record.run_id)
        if events is None:  # an ended run (nothing reports after the end, but stay correct)
            events = self._read_events(record.run_id)
        event = RunEvent(len(events) + 1, time.time(), payload)
        events.append(event)
        self._append_event(record.run_id, event)
        if not isinstance(payload, MetricsReport):  # the record is saved again at every state change, metrics included
            self._save(record)
        if record.terminal:
            self._events.pop(record.run_id, None)
        # Wake every watcher, then give later waiters a fresh event to wait on.
        self._changed[record.run_id].set()
        self._changed[record.run_id] = asyncio.Event()

    # --- persistence -------------------------------------------------------------------
    def _save(self, record: RunRecord) -> None:
        directory = self._dir / record.run_id
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / "run.json.tmp"
        tmp.write_text(json.dumps(record.to_json()))
        os.replace(tmp, directory / "run.json")

    def _append_event(self, run_id: str, event: RunEvent) -> None:
        directory = self._dir / run_id
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / "events.jsonl", "a") as f:
            f.write(json.dumps(event.to_json()) + "\n")

    def _read_events(self, run_id: str) -> list[RunEvent]:
        try:
            lines = (self._dir / run_id / "events.jsonl").read_text().splitlines()
        except FileNotFoundError:
            return []
        events = []
        for line in lines:
            try:
                events.append(RunEvent.from_json(json.loads(line)))
            except (ValueError, TypeError, KeyError):  # a line cut short by a crash
                log.warning("run %s: skipping an unreadable event line", run_id)
        return events

    def load(self) -> int:
        """Reads the runs a previous trainer left; returns how many were loaded."""
        if not self._dir.is_dir():
            return 0
        loaded = 0
        for run_json in sorted(self._dir.glob("*/run.json")):
            try:
                record = RunRecord.from_json(json.loads(run_json.read_text()))
            except (OSError, ValueError, TypeError, KeyError, json_format.ParseError) as exc:
                log.warning("skipping unreadable run record %s: %s", run_json, exc)
                continue
            self._runs[record.run_id] = record
            if not record.terminal:
                self._events[record.run_id] = self._read_events(record.run_id)
                _end_last_line(self._dir / record.run_id / "events.jsonl")
            self._changed[record.run_id] = asyncio.Event()
            if record.request_id:
                self._by_request[record.request_id] = record.run_id
            metrics.RUNS_BY_STATE.labels(state=record.state).inc()
            if not record.terminal:  # every active state may end in FAILED
                self._recover_after_restart(record)
                reason = "the trainer restarted while the run was active"
                self.transition(record.run_id, RunState.FAILED, reason, Failure(FailureKind.TRAINER_ERROR, reason))
            loaded += 1
        self._remove_staging()
        return loaded

    def _remove_staging(self) -> None:
        """Removes the staging directories (ctx.make_checkpoint_dir) that runs of an earlier,
        killed trainer left: a run's executor removes its own as it ends, so after loading (every
        loaded run has ended) any that is left belongs to no one."""
        left = [p for p in self._dir.glob("*/" + RunPaths.STAGING) if p.parent.name in self._runs]
        for staging in left:
            shutil.rmtree(staging, ignore_errors=True)
        if left:
            log.info("removed %d staging directories left by earlier runs", len(left))

    def _recover_after_restart(self, record: RunRecord) -> None:
        try:
            policy = retention_policy(record.spec.checkpoint_policy)
        except errors.DomainError:  # a record edited by hand: latest only
            policy = RetentionPolicy()
        store = checkpoint_store(RunPaths.of(self._storage_root, record.run_id).checkpoints)
        self.recover_checkpoint(record.run_id, store, policy)


def _end_last_line(path: Path) -> None:
    """Ends a line cut short by a crash, so the next event appended is a line of its own."""
    try:
        with open(path, "rb+") as f:
            if f.seek(0, os.SEEK_END) == 0:
                return
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
    except FileNotFoundError:
        pass
