"""A user's own code end to end: a project directory that is not one of the built-in examples
(user_project/my_trainer), uploaded through the real scheduler over gRPC and run by the real
trainer on the session's Ray head, whose allowlist does not name it. Single worker and 2-rank
data parallel, each failing once and resuming from its own checkpoint; the 2-rank job
fine-tunes from the first job's best checkpoint (init_from)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import grpc
import pytest

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.services.client.packaging import upload_package
from paddleray.services.trainer.__main__ import registrations as trainer_registrations
from paddleray.services.trainer.settings import TrainerSettings
from paddleray.services.trainer.trainer import Trainer
from support import ServerThread

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]
J = job_pb2.JobState
PROJECT = Path(__file__).parent / "user_project"


@pytest.fixture
def storage(tmp_path) -> Path:
    return tmp_path / "storage"


@pytest.fixture
def trainer(ray_cluster, storage):
    """The trainer with its default allowlist (the built-in examples only)."""
    settings = TrainerSettings(port=0, storage_root=storage, stop_grace_s=2.0, pool_max_idle_groups=1)
    trainer = Trainer(settings)
    server = ServerThread(settings, trainer_registrations(trainer))
    server.run(trainer.start())
    yield server
    server.run(trainer.shutdown())
    server.stop()


def _job(uri: str, config: dict, workers: int = 1) -> job_pb2.Job:
    job = job_pb2.Job(
        spec=common_pb2.TrainingSpec(
            entrypoint="my_trainer.train:train", num_workers=workers,
            resources_per_worker=common_pb2.Resources(num_cpus=1),
            runtime_env=common_pb2.RuntimeEnv(working_dir=uri),
            checkpoint_policy=common_pb2.CheckpointPolicy(best_metric="loss", best_mode=common_pb2.METRIC_MODE_MIN),
        ),
        retry_policy=common_pb2.RetryPolicy(max_retries=1),
    )
    job.retry_policy.initial_backoff.FromMilliseconds(100)
    job.spec.config.update(config)
    return job


def _metrics_by_attempt(events) -> dict[int, list[dict[str, float]]]:
    found: dict[int, list[dict[str, float]]] = {}
    for event in events:
        if event.WhichOneof("payload") == "metrics":
            found.setdefault(event.attempt, []).append(dict(event.metrics.metrics))
    return found


def _upload(address: str, root: Path) -> str:
    with grpc.insecure_channel(address) as channel:
        return upload_package(channel, root)


async def test_uploaded_user_code_trains_resumes_and_fine_tunes(stack_factory, trainer, storage, tmp_path):
    project = tmp_path / "user_project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("__pycache__"))
    async with stack_factory(trainer_address=trainer.address, storage_root=storage) as stack:
        uri = await asyncio.to_thread(_upload, stack.address, project)

        # Single worker: fails in epoch 2, the retry resumes from the epoch-1 checkpoint.
        base = await stack.create(_job(uri, {"epochs": 3, "fail_at_epoch": 2}), job_id="baseline")
        done = await stack.wait_terminal(base.name, timeout=240)
        assert done.state == J.JOB_STATE_SUCCEEDED, done.state_reason
        assert [a.state for a in done.attempts] == [J.JOB_STATE_FAILED, J.JOB_STATE_SUCCEEDED]
        assert "injected failure at epoch 2" in done.attempts[0].failure_reason
        assert done.attempts[1].resumed_from.step == 1 and Path(done.attempts[1].resumed_from.uri).is_dir()
        events = await stack.events(base.name)
        by_attempt = _metrics_by_attempt(events)
        assert [m["started_at_epoch"] for m in by_attempt[2]] == [2.0, 2.0], "resumed, not restarted"
        assert [m["epoch"] for m in by_attempt[1] + by_attempt[2]] == [1.0, 2.0, 3.0]
        checkpoints = [e.checkpoint for e in events if e.WhichOneof("payload") == "checkpoint"]
        best = min(checkpoints, key=lambda c: c.metrics["loss"])

        # 2-rank data parallel, fine-tuning from the baseline's best checkpoint; it fails once
        # too, and its retry resumes from its own checkpoint, not from the baseline's.
        tune = _job(uri, {"epochs": 2, "fail_at_epoch": 2}, workers=2)
        tune.spec.init_from.job = base.name
        tuned = await stack.create(tune, job_id="fine-tune")
        assert tuned.spec.init_from.resolved_uri == best.uri
        done = await stack.wait_terminal(tuned.name, timeout=300)
        assert done.state == J.JOB_STATE_SUCCEEDED, done.state_reason
        assert [a.state for a in done.attempts] == [J.JOB_STATE_FAILED, J.JOB_STATE_SUCCEEDED]
        by_attempt = _metrics_by_attempt(await stack.events(tuned.name))
        first, retry = by_attempt[1][0], by_attempt[2][0]
        assert first["world_size"] == 2.0 and first["started_at_epoch"] == 1.0
        assert first["initialized_from_epoch"] == best.step, "user code read ctx.init_checkpoint"
        assert retry["started_at_epoch"] == 2.0 and retry["initialized_from_epoch"] == -1.0, \
            "a retry resumes from the job's own checkpoint (ctx.latest_checkpoint wins)"

        # A fresh start for comparison: the fine-tune began from trained weights.
        fresh = await stack.create(_job(uri, {"epochs": 1}), job_id="fresh")
        fresh_done = await stack.wait_terminal(fresh.name, timeout=240)
        assert fresh_done.state == J.JOB_STATE_SUCCEEDED, fresh_done.state_reason
        assert first["loss_before"] < fresh_done.latest_metrics.metrics["loss_before"]
        logs = [line.text async for r in stack.stub.GetJobLogs(js.GetJobLogsRequest(name=tuned.name, attempt=1))
                for line in r.lines]
        assert "rank 1/2: epochs 1..2" in logs
