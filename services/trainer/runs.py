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
import os
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from paddleray.common.v1 import common_pb2
from paddleray.services.common import errors
from paddleray.services.trainer import metrics
from paddleray.services.trainer.checkpoints import CheckpointInfo, CheckpointStore, RetentionPolicy
from paddleray.services.trainer.spec import retention_policy

log = logging.getLogger(__name__)

PENDING, STARTING, RUNNING, STOPPING = "PENDING", "STARTING", "RUNNING", "STOPPING"
SUCCEEDED, FAILED, STOPPED, TIMED_OUT = "SUCCEEDED", "FAILED", "STOPPED", "TIMED_OUT"
TERMINAL = frozenset({SUCCEEDED, FAILED, STOPPED, TIMED_OUT})
_ENDED_BY_STOP = {STOPPED, TIMED_OUT, FAILED}
TRANSITIONS = {
    PENDING: {STARTING, STOPPING, *_ENDED_BY_STOP},
    STARTING: {RUNNING, STOPPING, *_ENDED_BY_STOP},
    RUNNING: {STOPPING, SUCCEEDED, FAILED},
    # Once a stop was asked, the run ends as the stop says, even if user code failed meanwhile.
    STOPPING: {STOPPED, TIMED_OUT, FAILED},
}


@dataclass
class RunEvent:
    sequence: int
    time: float
    kind: str  # "state" | "metrics" | "checkpoint"
    data: dict[str, Any]


@dataclass
class RunRecord:
    run_id: str
    spec: dict[str, Any]  # the TrainingSpec as given, in proto JSON form
    job: str = ""
    request_id: str = ""
    timeout_s: float | None = None
    resume_from: dict[str, Any] | None = None  # a Checkpoint in proto JSON form
    labels: dict[str, str] = field(default_factory=dict)
    state: str = PENDING
    state_reason: str = ""
    workers: list[dict[str, Any]] = field(default_factory=list)
    latest_metrics: dict[str, Any] | None = None  # {"step": int, "metrics": {...}}
    latest_checkpoint: dict[str, Any] | None = None  # CheckpointInfo fields, path as str
    best_checkpoint: dict[str, Any] | None = None
    create_time: float = field(default_factory=time.time)
    start_time: float | None = None
    end_time: float | None = None

    @property
    def name(self) -> str:
        return f"runs/{self.run_id}"

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def training_spec(self) -> common_pb2.TrainingSpec:
        return json_format.ParseDict(self.spec, common_pb2.TrainingSpec())


def checkpoint_dict(info: CheckpointInfo) -> dict[str, Any]:
    return {**info.manifest(), "path": str(info.path)}


class RunRegistry:
    def __init__(self, storage_root: Path) -> None:
        self._dir = Path(storage_root) / "runs"
        self._runs: dict[str, RunRecord] = {}
        self._events: dict[str, list[RunEvent]] = {}  # active runs only
        self._changed: dict[str, asyncio.Event] = {}
        self._by_request: dict[str, str] = {}

    # --- reading -----------------------------------------------------------------------
    def get(self, run_id: str) -> RunRecord:
        try:
            return self._runs[run_id]
        except KeyError:
            raise errors.NotFound(f"runs/{run_id} not found") from None

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
        self._emit(record, "state", {"from": "UNSPECIFIED", "to": record.state, "reason": "accepted"})
        metrics.RUNS_BY_STATE.labels(state=record.state).inc()
        return record

    def transition(self, run_id: str, state: str, reason: str = "") -> bool:
        """Moves a run to `state`; False (and no change) when the state machine forbids it."""
        record = self.get(run_id)
        if state not in TRANSITIONS.get(record.state, ()):
            return False
        previous, record.state, record.state_reason = record.state, state, reason
        now = time.time()
        if state == RUNNING:
            record.start_time = now
        if state in TERMINAL:
            record.end_time = now
        metrics.RUNS_BY_STATE.labels(state=previous).dec()
        metrics.RUNS_BY_STATE.labels(state=state).inc()
        self._emit(record, "state", {"from": previous, "to": state, "reason": reason})
        log.info("run %s: %s -> %s %s", run_id, previous, state, reason)
        return True

    def explain(self, run_id: str, state: str, reason: str) -> None:
        """Updates why a run is still in `state` (no event: the state did not change)."""
        record = self.get(run_id)
        if record.state == state and record.state_reason != reason:
            record.state_reason = reason
            self._save(record)

    def set_workers(self, run_id: str, workers: list[dict[str, Any]]) -> None:
        record = self.get(run_id)
        record.workers = workers
        self._save(record)

    def add_metrics(self, run_id: str, step: int, values: dict[str, float]) -> None:
        record = self.get(run_id)
        record.latest_metrics = {"step": step, "metrics": values}
        self._emit(record, "metrics", record.latest_metrics)

    def add_checkpoint(self, run_id: str, info: CheckpointInfo, best: CheckpointInfo | None) -> None:
        record = self.get(run_id)
        record.latest_checkpoint = checkpoint_dict(info)
        record.best_checkpoint = checkpoint_dict(best) if best is not None else None
        self._emit(record, "checkpoint", record.latest_checkpoint)

    def recover_checkpoint(self, run_id: str, store: CheckpointStore, policy: RetentionPolicy) -> None:
        """Records the newest checkpoint on disk if its report never arrived.

        ctx.report returns without waiting for the trainer: its checkpoint is committed on disk
        first, with the report's step and metrics in the manifest, so a report lost with its
        worker (or with a previous trainer) is rebuilt from there, metrics event included.
        Reports arrive in order, so when the newest checkpoint is unknown, so are its metrics.
        """
        latest = store.latest()
        record = self.get(run_id)
        known = record.latest_checkpoint
        if latest is None or (known is not None and known["path"] == str(latest.path)):
            return
        if record.latest_metrics is None or record.latest_metrics["step"] <= latest.step:
            self.add_metrics(run_id, latest.step, dict(latest.metrics))
        self.add_checkpoint(run_id, latest, store.best(policy))

    def _emit(self, record: RunRecord, kind: str, data: dict[str, Any]) -> None:
        events = self._events.get(record.run_id)
        if events is None:  # an ended run (nothing reports after the end, but stay correct)
            events = self._read_events(record.run_id)
        event = RunEvent(len(events) + 1, time.time(), kind, data)
        events.append(event)
        self._append_event(record.run_id, event)
        if kind != "metrics":  # the record is saved again at every state change, metrics included
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
        tmp.write_text(json.dumps(asdict(record)))
        os.replace(tmp, directory / "run.json")

    def _append_event(self, run_id: str, event: RunEvent) -> None:
        directory = self._dir / run_id
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / "events.jsonl", "a") as f:
            f.write(json.dumps(asdict(event)) + "\n")

    def _read_events(self, run_id: str) -> list[RunEvent]:
        try:
            lines = (self._dir / run_id / "events.jsonl").read_text().splitlines()
        except FileNotFoundError:
            return []
        events = []
        for line in lines:
            try:
                events.append(RunEvent(**json.loads(line)))
            except (ValueError, TypeError):  # a line cut short by a crash
                log.warning("run %s: skipping an unreadable event line", run_id)
        return events

    def load(self) -> int:
        """Reads the runs a previous trainer left; returns how many were loaded."""
        if not self._dir.is_dir():
            return 0
        loaded = 0
        for run_json in sorted(self._dir.glob("*/run.json")):
            try:
                record = RunRecord(**json.loads(run_json.read_text()))
            except (OSError, ValueError, TypeError) as exc:
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
                self.transition(record.run_id, FAILED, "the trainer restarted while the run was active")
            loaded += 1
        return loaded


    def _recover_after_restart(self, record: RunRecord) -> None:
        try:
            policy = retention_policy(record.training_spec().checkpoint_policy)
        except (errors.DomainError, json_format.ParseError, ValueError):  # a record edited by hand: latest only
            policy = RetentionPolicy()
        self.recover_checkpoint(record.run_id, CheckpointStore(self._dir / record.run_id / "checkpoints"), policy)


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
