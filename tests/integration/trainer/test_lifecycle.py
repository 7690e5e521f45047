"""Stops, timeouts, and resuming a killed run from its last checkpoint with no lost epochs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from google.protobuf import duration_pb2

from paddleray.common.v1 import common_pb2
from paddleray.services.common.identity import LOCAL
from paddleray.services.trainer.records import FailureKind, RunState
from paddleray.trainer.v1 import run_pb2, trainer_service_pb2

pytestmark = pytest.mark.integration


def _stop(client, name, grace_s):
    request = trainer_service_pb2.StopRunRequest(
        name=name, grace_period=duration_pb2.Duration(seconds=grace_s), reason="user asked"
    )
    return client.stub.StopRun(request, timeout=30).run


def test_stop_is_graceful_when_user_code_checks_should_stop(client):
    run = client.start("wait_for_stop")
    client.wait_for(run.name, lambda r: r.state == run_pb2.RUN_STATE_RUNNING)
    assert _stop(client, run.name, 30).state == run_pb2.RUN_STATE_STOPPING
    done = client.wait_done(run.name)
    assert done.state == run_pb2.RUN_STATE_STOPPED
    assert done.state_reason == "user asked"
    assert done.failure.kind == common_pb2.FAILURE_KIND_STOPPED and not done.failure.HasField("rank")
    assert done.latest_metrics.metrics["stopped_gracefully"] == 1.0
    assert _stop(client, run.name, 1).state == run_pb2.RUN_STATE_STOPPED, "stopping a finished run changes nothing"


def test_stop_kills_ranks_that_ignore_it_after_the_grace_period(client):
    run = client.start("ignore_stop", num_workers=2)
    client.wait_for(run.name, lambda r: r.state == run_pb2.RUN_STATE_RUNNING)
    _stop(client, run.name, 1)
    done = client.wait_done(run.name, timeout=60)
    assert done.state == run_pb2.RUN_STATE_STOPPED
    assert "killed after the 1s grace period" in done.state_reason


def test_timeout_ends_the_run_as_timed_out(client):
    run = client.start("ignore_stop", timeout=duration_pb2.Duration(seconds=2))
    done = client.wait_done(run.name, timeout=90)
    assert done.state == run_pb2.RUN_STATE_TIMED_OUT
    assert done.failure.kind == common_pb2.FAILURE_KIND_TIMEOUT
    assert done.state_reason.startswith("ran past its timeout of 2s")


def test_a_run_that_cannot_be_placed_times_out_while_pending(client):
    spec = client.spec("hello")
    spec.resources_per_worker.num_cpus = 64  # more than the cluster has: it waits for placement
    request = trainer_service_pb2.StartRunRequest(spec=spec, timeout=duration_pb2.Duration(seconds=1))
    run = client.stub.StartRun(request).run
    done = client.wait_done(run.name, timeout=60)
    assert done.state == run_pb2.RUN_STATE_TIMED_OUT
    assert done.state_reason == "ran past its timeout of 1s; before its workers started"
    assert not done.workers
    assert done.failure.kind == common_pb2.FAILURE_KIND_TIMEOUT, "timed out before the placement was judged"


def test_a_run_that_times_out_waiting_for_a_placement_the_cluster_can_never_give_says_so(client):
    spec = client.spec("hello")
    spec.resources_per_worker.num_cpus = 64  # the cluster has 2
    request = trainer_service_pb2.StartRunRequest(spec=spec, timeout=duration_pb2.Duration(seconds=4))
    done = client.wait_done(client.stub.StartRun(request).run.name, timeout=60)
    assert done.state == run_pb2.RUN_STATE_TIMED_OUT
    assert done.failure.kind == common_pb2.FAILURE_KIND_PLACEMENT_IMPOSSIBLE
    assert "the run needs 64 CPU (has 2 CPU) in total" in done.failure.message


def _epochs(client, name):
    events = client.stub.WatchRun(trainer_service_pb2.WatchRunRequest(name=name), timeout=120)
    return [int(e.event.metrics.metrics["epoch"]) for e in events if e.event.HasField("metrics")]


def test_a_killed_run_resumes_from_its_last_checkpoint_without_losing_epochs(client, tmp_path, fault_figures):
    config = {"epochs": 6, "out_dir": str(tmp_path)}
    crashed = client.wait_done(client.start("epochs", {**config, "crash_at_epoch": 5}).name)
    assert crashed.state == run_pb2.RUN_STATE_FAILED and crashed.state_reason.startswith(f"rank 0 died on node {crashed.workers[0].node_id}:")
    assert crashed.failure.kind == common_pb2.FAILURE_KIND_WORKER_LOST
    assert crashed.latest_checkpoint.epoch == 4
    assert _epochs(client, crashed.name) == [1, 2, 3, 4]

    resumed = client.start("epochs", config, resume_from=crashed.latest_checkpoint)
    assert client.wait_done(resumed.name).state == run_pb2.RUN_STATE_SUCCEEDED
    assert _epochs(client, resumed.name) == [5, 6]

    straight = client.start("epochs", config)
    assert client.wait_done(straight.name).state == run_pb2.RUN_STATE_SUCCEEDED
    weights = {name: json.loads((tmp_path / f"{name.split('/')[-1]}.json").read_text()) for name in (resumed.name, straight.name)}
    assert weights[resumed.name] == weights[straight.name], "model and optimizer state resumed exactly"
    trained = _epochs(client, crashed.name) + _epochs(client, resumed.name)
    fault_figures.record(faults_injected=1, epochs_planned=6,
                         epochs_lost=len(set(range(1, 7)) - set(trained)), epochs_repeated=len(trained) - len(set(trained)),
                         resumed_from_epoch=crashed.latest_checkpoint.epoch)


def test_checkpoint_retention_and_best_checkpoint(client, tmp_path):
    spec = client.spec("epochs", {"epochs": 4, "out_dir": str(tmp_path)})
    spec.checkpoint_policy.CopyFrom(
        common_pb2.CheckpointPolicy(keep_last=1, best_metric="loss", best_mode=common_pb2.METRIC_MODE_MIN)
    )
    run = client.stub.StartRun(trainer_service_pb2.StartRunRequest(spec=spec)).run
    done = client.wait_done(run.name)
    assert done.state == run_pb2.RUN_STATE_SUCCEEDED
    assert done.latest_checkpoint.epoch == 4
    events = client.stub.WatchRun(trainer_service_pb2.WatchRunRequest(name=run.name), timeout=60)
    checkpoints = [e.event.checkpoint for e in events if e.event.HasField("checkpoint")]
    best = min(checkpoints, key=lambda c: (c.metrics["loss"], c.epoch))  # a tie keeps the earlier one
    assert done.best_checkpoint.uri == best.uri and done.best_checkpoint.epoch == best.epoch
    # keep_last=1 keeps the newest; the best one is kept on top of it, once.
    kept = sorted(p.name for p in Path(done.latest_checkpoint.uri).parent.iterdir())
    assert kept == sorted({Path(done.latest_checkpoint.uri).name, Path(best.uri).name})


def test_trainer_shutdown_ends_active_runs_as_stopped(client, trainer, tmp_path):
    from paddleray.services.trainer.settings import TrainerSettings
    from paddleray.services.trainer.trainer import Trainer

    own = Trainer(TrainerSettings(storage_root=tmp_path, entrypoint_allowlist=trainer.settings.entrypoint_allowlist))
    # The module's trainer cannot know that this one waits for its idle groups' CPUs.
    trainer.pool.shutdown()

    async def scenario():
        await own.start()  # this process is the Ray driver already: the trainer adopts it
        record = await own.start_run(client.spec("ignore_stop"), caller=LOCAL)
        while record.state != RunState.RUNNING:
            await asyncio.sleep(0.05)
        await own.shutdown()
        return record

    record = asyncio.run(asyncio.wait_for(scenario(), timeout=120))
    assert record.state == RunState.STOPPED and record.state_reason == "the trainer is shutting down"
    assert record.failure is not None and record.failure.kind == FailureKind.STOPPED
    assert own.pool.idle_count() == 0


def _waiting_placement_groups(cpus: float) -> set[str]:
    import ray

    return {
        pg_id for pg_id, pg in ray.util.placement_group_table().items()
        if pg["state"] != "REMOVED" and any(b.get("CPU") == cpus for b in pg["bundles"].values())
    }


def test_an_unplaceable_run_says_what_it_lacks_and_shutdown_frees_its_reservation(client, trainer, tmp_path):
    from paddleray.services.trainer.settings import TrainerSettings
    from paddleray.services.trainer.trainer import Trainer

    own = Trainer(TrainerSettings(storage_root=tmp_path, entrypoint_allowlist=trainer.settings.entrypoint_allowlist))
    spec = client.spec("hello")
    spec.resources_per_worker.num_cpus = 48  # more than the cluster has: it waits for placement

    async def scenario():
        await own.start()  # this process is the Ray driver already: the trainer adopts it
        record = await own.start_run(spec, caller=LOCAL)
        while "48 CPU" not in record.state_reason:
            await asyncio.sleep(0.1)
        waiting = _waiting_placement_groups(48)
        await own.shutdown()
        # The trainer's loop goes on (as in a service): nothing may go on placing the group.
        for _ in range(100):
            if not _waiting_placement_groups(48):
                break
            await asyncio.sleep(0.1)
        return record, waiting, _waiting_placement_groups(48)

    record, waiting, left = asyncio.run(asyncio.wait_for(scenario(), timeout=120))
    assert len(waiting) == 1
    assert record.state == "STOPPED"
    assert left == set(), "the pending placement group is removed at shutdown"
    reloaded = json.loads((Path(own.settings.storage_root) / "runs" / record.run_id / "run.json").read_text())
    assert reloaded["state"] == "STOPPED"


def test_a_pending_run_says_which_resources_it_waits_for(client):
    spec = client.spec("hello")
    spec.resources_per_worker.num_cpus = 64
    run = client.stub.StartRun(trainer_service_pb2.StartRunRequest(spec=spec)).run
    try:
        pending = client.wait_for(run.name, lambda r: r.state_reason != "", timeout=60)
        assert pending.state == run_pb2.RUN_STATE_PENDING
        assert pending.state_reason == (
            "waiting for resources the cluster does not have: the run needs 64 CPU (has 2 CPU) in total"
        )
    finally:
        _stop(client, run.name, 0)
    assert client.wait_done(run.name).state == run_pb2.RUN_STATE_STOPPED
