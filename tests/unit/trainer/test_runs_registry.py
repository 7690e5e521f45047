"""RunRegistry: state machine, gap-free event sequences, watchers, and records that survive a restart."""

from __future__ import annotations

import asyncio
import json

import pytest

from paddleray.common.v1 import common_pb2
from paddleray.services.common import errors
from paddleray.services.common.checkpoints import CheckpointInfo, CheckpointStore, RetentionPolicy
from paddleray.services.trainer import runs
from paddleray.services.trainer.records import (
    MAX_TRACEBACK_CHARS,
    Failure,
    FailureKind,
    MetricsReport,
    RunState,
    StateChange,
)

pytestmark = pytest.mark.unit


def _record(run_id="r1", **fields):
    return runs.RunRecord(run_id=run_id, spec=common_pb2.TrainingSpec(entrypoint="m:f", num_workers=2), **fields)


def test_transitions_follow_the_state_machine(tmp_path):
    registry = runs.RunRegistry(tmp_path)
    registry.add(_record())
    assert registry.transition("r1", RunState.STARTING, "placed")
    assert not registry.transition("r1", RunState.SUCCEEDED), "STARTING cannot jump to SUCCEEDED"
    assert registry.transition("r1", RunState.RUNNING)
    assert registry.get("r1").start_time is not None
    assert registry.transition("r1", RunState.SUCCEEDED)
    assert registry.get("r1").terminal and registry.get("r1").end_time is not None
    assert not registry.transition("r1", RunState.FAILED), "terminal states are final"
    kinds = [(e.sequence, e.payload.to_state) for e in registry.events("r1")]
    assert kinds == [(1, "PENDING"), (2, "STARTING"), (3, "RUNNING"), (4, "SUCCEEDED")]


def test_duplicates_and_unknown_runs(tmp_path):
    registry = runs.RunRegistry(tmp_path)
    registry.add(_record(request_id="req"))
    with pytest.raises(errors.AlreadyExists):
        registry.add(_record())
    with pytest.raises(errors.NotFound):
        registry.get("missing")
    assert registry.by_request_id("req").run_id == "r1"


def test_records_and_events_survive_a_restart(tmp_path):
    registry = runs.RunRegistry(tmp_path)
    registry.add(_record("done", request_id="req-done", tenant="team-a"))
    registry.transition("done", RunState.STARTING)
    registry.transition("done", RunState.RUNNING)
    registry.add_metrics("done", 3, {"loss": 0.5})
    info = CheckpointInfo(tmp_path / "ckpt", step=3, epoch=1, metrics={"loss": 0.5}, create_time=1.0)
    registry.add_checkpoint("done", info, info)
    registry.transition("done", RunState.SUCCEEDED)
    registry.add(_record("active"))
    registry.transition("active", RunState.STARTING)

    reloaded = runs.RunRegistry(tmp_path)
    assert reloaded.load() == 2
    done = reloaded.get("done")
    assert done.state == RunState.SUCCEEDED and done.latest_metrics == MetricsReport(3, {"loss": 0.5})
    assert done.best_checkpoint.path == tmp_path / "ckpt"
    assert [e.sequence for e in reloaded.events("done")] == [1, 2, 3, 4, 5, 6]
    assert reloaded.by_request_id("req-done").run_id == "done"
    assert done.tenant == "team-a"  # a run stays its tenant's across a restart
    active = reloaded.get("active")
    assert active.state == RunState.FAILED and "restarted" in active.state_reason
    assert reloaded.events("active")[-1].sequence == 3
    lines = (tmp_path / "runs" / "active" / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["sequence"] for line in lines] == [1, 2, 3]


async def test_watchers_get_every_event_then_end(tmp_path):
    registry = runs.RunRegistry(tmp_path)
    registry.add(_record())

    async def collect(after):
        return [e.sequence async for e in registry.watch("r1", after)]

    early, late = asyncio.create_task(collect(0)), asyncio.create_task(collect(2))
    await asyncio.sleep(0.01)
    registry.transition("r1", RunState.STARTING)
    await asyncio.sleep(0.01)
    registry.transition("r1", RunState.RUNNING)
    registry.add_metrics("r1", 1, {"x": 1.0})
    registry.transition("r1", RunState.FAILED, "rank 1 died")
    assert await asyncio.wait_for(early, 5) == [1, 2, 3, 4, 5]
    assert await asyncio.wait_for(late, 5) == [3, 4, 5]
    assert await asyncio.wait_for(collect(5), 5) == []


async def test_ended_runs_are_served_from_their_files_not_memory(tmp_path):
    registry = runs.RunRegistry(tmp_path)
    registry.add(_record())
    registry.transition("r1", RunState.STARTING)
    registry.transition("r1", RunState.RUNNING)
    for step in range(1, 101):
        registry.add_metrics("r1", step, {"loss": 1.0 / step})
    assert len(registry._events["r1"]) == 103
    registry.transition("r1", RunState.SUCCEEDED)
    assert "r1" not in registry._events, "an ended run's events leave memory"
    assert [e.sequence for e in registry.events("r1", after=100)] == [101, 102, 103, 104]
    watched = [e async for e in registry.watch("r1", after=2)]
    assert [e.sequence for e in watched] == list(range(3, 105))
    assert watched[-1].payload.to_state == RunState.SUCCEEDED and watched[4].payload == MetricsReport(4, {"loss": 0.25})


def test_a_torn_event_line_is_skipped_on_load(tmp_path):
    registry = runs.RunRegistry(tmp_path)
    registry.add(_record("active"))
    registry.transition("active", RunState.STARTING)
    with open(tmp_path / "runs" / "active" / "events.jsonl", "a") as f:
        f.write('{"sequence": 3, "time": 1.0, "ki')  # the process died while writing
    reloaded = runs.RunRegistry(tmp_path)
    assert reloaded.load() == 1
    assert reloaded.get("active").state == RunState.FAILED
    assert [(e.sequence, e.payload.to_state) for e in reloaded.events("active")] == [
        (1, RunState.PENDING), (2, RunState.STARTING), (3, RunState.FAILED),
    ]


def _commit(tmp_path, run_id, step, **metrics):
    store = CheckpointStore(tmp_path / "runs" / run_id / "checkpoints")
    source = tmp_path / f"src-{step}"
    source.mkdir()
    (source / "model.pdparams").write_bytes(b"weights")
    return store, store.commit(source, step, step, metrics)


def test_a_checkpoint_whose_report_never_arrived_is_recorded_from_disk_with_its_metrics(tmp_path):
    registry = runs.RunRegistry(tmp_path)
    registry.add(_record())
    registry.add_metrics("r1", 1, {"epoch": 1.0})
    store, info = _commit(tmp_path, "r1", 2, epoch=2.0, loss=0.5)
    registry.recover_checkpoint("r1", store, RetentionPolicy(best_metric="loss", best_mode="min"))
    record = registry.get("r1")
    assert record.latest_metrics == MetricsReport(2, {"epoch": 2.0, "loss": 0.5})
    assert record.latest_checkpoint.path == record.best_checkpoint.path == info.path
    kinds = [type(e.payload).__name__ for e in registry.events("r1")]
    registry.recover_checkpoint("r1", store, RetentionPolicy())
    assert [type(e.payload).__name__ for e in registry.events("r1")] == kinds, "a recorded checkpoint is not recorded twice"


def test_a_restarted_trainer_records_the_newest_checkpoint_of_a_run_it_fails(tmp_path):
    registry = runs.RunRegistry(tmp_path)
    registry.add(_record())
    _, info = _commit(tmp_path, "r1", 3, epoch=3.0)
    restarted = runs.RunRegistry(tmp_path)
    assert restarted.load() == 1
    record = restarted.get("r1")
    assert record.state == RunState.FAILED and record.latest_checkpoint.path == info.path
    assert record.latest_metrics == MetricsReport(3, {"epoch": 3.0})


def test_a_failure_is_kept_on_the_record_and_its_state_event_and_survives_a_restart(tmp_path):
    registry = runs.RunRegistry(tmp_path)
    registry.add(_record())
    registry.transition("r1", RunState.STARTING)
    registry.transition("r1", RunState.RUNNING)
    failure = Failure(FailureKind.USER_CODE, "ValueError: bad", rank=1, traceback="x" * 20_000)
    registry.transition("r1", RunState.FAILED, "rank 1 raised ValueError: bad", failure)
    assert len(registry.get("r1").failure.traceback) == MAX_TRACEBACK_CHARS, "the traceback is bounded"
    reloaded = runs.RunRegistry(tmp_path)
    reloaded.load()
    record = reloaded.get("r1")
    assert record.failure == registry.get("r1").failure and record.failure.kind == FailureKind.USER_CODE
    assert record.failure.rank == 1 and record.spec.num_workers == 2 and record.world_size == 2
    last = reloaded.events("r1")[-1].payload
    assert isinstance(last, StateChange) and last.failure == record.failure


def test_a_run_active_when_the_trainer_restarted_fails_as_a_trainer_error(tmp_path):
    registry = runs.RunRegistry(tmp_path)
    registry.add(_record())
    reloaded = runs.RunRegistry(tmp_path)
    reloaded.load()
    assert reloaded.get("r1").failure.kind == FailureKind.TRAINER_ERROR


def test_a_stored_record_that_cannot_be_shown_breaks_neither_loading_nor_listing(tmp_path, caplog):
    """A run.json with a 2**63 s timeout made ListRuns answer INTERNAL for everyone, restarts too."""
    from paddleray.services.trainer import convert

    registry = runs.RunRegistry(tmp_path)
    registry.add(_record("good"))
    registry.add(_record("huge", timeout_s=60.0))
    stored = tmp_path / "runs" / "huge" / "run.json"
    data = json.loads(stored.read_text())
    data["timeout_s"] = 2.0**63
    stored.write_text(json.dumps(data))
    restarted = runs.RunRegistry(tmp_path)
    assert restarted.load() == 1
    assert [r.run_id for r in restarted.all()] == ["good"]
    assert "skipping unreadable run record" in caplog.text
    caplog.clear()
    unshowable = _record("direct", timeout_s=2.0**63)
    for _ in range(2):
        assert [r.name for r in convert.runs_shown([unshowable, _record("good")])] == ["runs/good"]
    assert caplog.text.count("runs/direct") + caplog.text.count("run direct") == 1


def test_loading_removes_the_staging_directories_killed_runs_left(tmp_path):
    registry = runs.RunRegistry(tmp_path)
    registry.add(_record("killed"))  # active when its trainer was killed
    registry.add(_record("ended"))
    registry.transition("ended", RunState.STARTING)
    registry.transition("ended", RunState.FAILED, "boom", Failure(FailureKind.USER_CODE, "boom"))
    for run_id in ("killed", "ended"):
        (tmp_path / "runs" / run_id / "staging" / "rank-0-abc").mkdir(parents=True)
    stray = tmp_path / "runs" / "not-a-run" / "staging"
    stray.mkdir(parents=True)  # no run.json: not ours to judge
    runs.RunRegistry(tmp_path).load()
    assert sorted(p.parent.name for p in (tmp_path / "runs").glob("*/staging")) == ["not-a-run"]
