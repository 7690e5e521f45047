"""The scheduler in front of the real trainer (in process, on the session's shared Ray head):
retry from a real checkpoint, and cancel of a real running job."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.services.trainer.__main__ import registrations as trainer_registrations
from paddleray.services.trainer.settings import TrainerSettings
from paddleray.services.trainer.trainer import Trainer
from paddleray.trainer.v1 import run_pb2
from support import ServerThread
from support.scheduler import make_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
J = job_pb2.JobState
WORKERS = Path(__file__).parent / "workers"
MODULE = "scheduler_test_entrypoints"


@pytest.fixture(scope="module")
def real_trainer(ray_cluster, tmp_path_factory):
    settings = TrainerSettings(port=0, storage_root=tmp_path_factory.mktemp("trainer-storage"),
                               entrypoint_allowlist=[MODULE], stop_grace_s=2.0, pool_max_idle_groups=1)
    trainer = Trainer(settings)
    server = ServerThread(settings, trainer_registrations(trainer))
    server.run(trainer.start())
    yield server
    server.run(trainer.shutdown())
    server.stop()


def _job(function: str, config: dict, **kw) -> job_pb2.Job:
    job = make_job(f"{MODULE}:{function}", config=config, **kw)
    job.spec.runtime_env.env_vars["PYTHONPATH"] = str(WORKERS)
    return job


async def test_failed_attempt_resumes_from_its_real_checkpoint(stack_factory, real_trainer):
    async with stack_factory(trainer_address=real_trainer.address) as stack:
        job = await stack.create(_job("flaky_epochs", {"epochs": 4, "fail_at_epoch": 3}, max_retries=1),
                                 job_id="flaky")
        done = await stack.wait_terminal(job.name, timeout=180)
        assert done.state == J.JOB_STATE_SUCCEEDED, done.state_reason
        first, second = done.attempts
        assert first.state == J.JOB_STATE_FAILED and "injected failure at epoch 3" in first.failure_reason
        # The real trainer's failure reaches the job as data: user code raised on rank 0.
        assert first.failure.kind == common_pb2.FAILURE_KIND_USER_CODE and first.failure.rank == 0
        assert "injected failure at epoch 3" in first.failure.message and first.failure.traceback
        assert second.resumed_from.epoch == 2 and Path(second.resumed_from.uri).is_dir()
        events = await stack.events(job.name)
        started = {e.attempt: e.metrics.metrics["started_at_epoch"] for e in events if e.WhichOneof("payload") == "metrics"}
        assert started == {1: 1.0, 2: 3.0}
        assert done.latest_checkpoint.epoch == 4


async def test_cancel_stops_the_real_run(stack_factory, real_trainer):
    async with stack_factory(trainer_address=real_trainer.address) as stack:
        job = await stack.create(_job("until_stopped", {}), job_id="endless")
        async with asyncio.timeout(120):
            async for response in stack.stub.WatchJob(js.WatchJobRequest(name=job.name)):
                if response.event.WhichOneof("payload") == "metrics":
                    break
        cancelled = (await stack.stub.CancelJob(js.CancelJobRequest(name=job.name, reason="enough"))).job
        assert cancelled.state == J.JOB_STATE_CANCELLED and cancelled.state_reason == "enough"
        run = await stack.app.trainer.get_run(cancelled.attempts[0].run)
        assert run.state == run_pb2.RUN_STATE_STOPPED


async def test_a_burst_of_reports_is_persisted_once_each_in_order(stack_factory, real_trainer):
    # 400 reports in a tight loop arrive far faster than one Redis write each: the follower
    # persists what queued up meanwhile in one write. None may be lost, repeated or reordered.
    count = 400
    async with stack_factory(trainer_address=real_trainer.address) as stack:
        job = await stack.create(_job("burst", {"count": count}), job_id="burst")
        done = await stack.wait_terminal(job.name, timeout=180)
        assert done.state == J.JOB_STATE_SUCCEEDED, done.state_reason
        events = await stack.events(job.name)
        steps = [e.metrics.step for e in events if e.WhichOneof("payload") == "metrics"]
        assert steps == list(range(1, count + 1))
        assert [e.metrics.metrics["value"] for e in events if e.WhichOneof("payload") == "metrics"][-1] == count * 0.5
        assert done.latest_metrics.step == count
        # Event sequence numbers stay dense and increasing across the batched writes.
        sequences = [e.sequence for e in events]
        assert sequences == list(range(1, len(sequences) + 1))
