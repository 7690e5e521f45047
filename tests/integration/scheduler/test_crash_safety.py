"""Crash safety with the scheduler as a real process: SIGKILL and restart, and two replicas.

The scripted trainer is served from the test's event loop and outlives every scheduler
process; its counters say how often each (job, attempt) was started on it.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from grpc import aio

from paddleray.scheduler.v1 import job_pb2, job_service_pb2_grpc
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.services.common import states
from paddleray.trainer.v1 import run_pb2
from support.fake_trainer import FakeTrainer, start_fake_trainer
from support.scheduler import SchedulerProcess, make_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
J = job_pb2.JobState


async def _create(address: str, jobs: dict[str, job_pb2.Job]) -> None:
    async with aio.insecure_channel(address) as channel:
        stub = job_service_pb2_grpc.JobServiceStub(channel)
        for job_id, job in jobs.items():
            await stub.CreateJob(js.CreateJobRequest(job=job, job_id=job_id, request_id=f"req-{job_id}"))


async def _states(address: str, names) -> dict[str, job_pb2.Job]:
    async with aio.insecure_channel(address) as channel:
        stub = job_service_pb2_grpc.JobServiceStub(channel)
        return {n: (await stub.GetJob(js.GetJobRequest(name=f"jobs/{n}"), timeout=10)).job for n in names}


async def _wait_all_terminal(address: str, names, timeout: float = 150) -> dict[str, job_pb2.Job]:
    async with asyncio.timeout(timeout):
        while True:
            jobs = await _states(address, names)
            if all(j.state in states.JOB_TERMINAL for j in jobs.values()):
                return jobs
            await asyncio.sleep(0.2)


async def test_sigkill_and_restart_every_job_finishes_exactly_once(redis_url, tmp_path, fault_figures):
    fake = FakeTrainer(cpus=2)
    trainer_server, trainer_address = await start_fake_trainer(fake)
    scheduler = SchedulerProcess(redis_url, trainer_address, tmp_path)
    try:
        await scheduler.start()
        jobs = {f"k{i}": make_job(config={"steps": 8, "step_s": 0.1, "checkpoint_every": 2}) for i in range(6)}
        # Two of them fail once mid-way and must be retried from their checkpoint, across crashes.
        for job_id in ("k1", "k4"):
            jobs[job_id] = make_job(config={"steps": 8, "step_s": 0.1, "checkpoint_every": 2, "fail_at_step": 5},
                                    max_retries=2)
        await _create(scheduler.address, jobs)
        restarts_s = []
        for _ in range(2):
            # Kill while runs are in flight (and some end unseen while it is down).
            async with asyncio.timeout(60):
                while not any(r.run.state == run_pb2.RUN_STATE_RUNNING for r in fake.runs.values()):
                    await asyncio.sleep(0.05)
            await asyncio.sleep(0.4)
            scheduler.kill()
            await asyncio.sleep(1.0)
            restarted = time.monotonic()
            await scheduler.start()
            restarts_s.append(time.monotonic() - restarted)
        done = await _wait_all_terminal(scheduler.address, jobs)
        assert {n: J.Name(j.state) for n, j in done.items()} == {n: "JOB_STATE_SUCCEEDED" for n in jobs}
        for job_id, job in done.items():
            expected = 2 if job_id in ("k1", "k4") else 1
            assert len(job.attempts) == expected, (job_id, job.attempts)
            for attempt in job.attempts:
                # Restarts asked again (idempotently) but the trainer created each run once.
                assert fake.runs_created[f"{job_id}-attempt-{attempt.number}"] == 1
            assert len(fake.runs_of(job.name)) == expected
        assert done["k1"].attempts[1].resumed_from.step == 4
        # The restarted processes re-attached to runs the killed ones had started.
        assert "took over" in scheduler.log_path().read_text() or "took over" in scheduler.log_path(2).read_text()
        assert fake.overlapping_jobs == set()
        fault_figures.record(
            faults_injected=2, jobs_submitted=len(jobs),
            jobs_lost=sum(j.state != J.JOB_STATE_SUCCEEDED for j in done.values()),
            runs_duplicated=sum(n - 1 for n in fake.runs_created.values()),
            retries_resumed_from_checkpoint=sum(len(j.attempts) - 1 for j in done.values()),
            restart_to_answering_s=round(max(restarts_s), 2),
        )
    finally:
        scheduler.stop()
        await trainer_server.stop(0.5)


async def test_two_replicas_never_dispatch_one_job_twice(redis_url, tmp_path, fault_figures):
    fake = FakeTrainer(cpus=4)
    trainer_server, trainer_address = await start_fake_trainer(fake)
    replicas = [SchedulerProcess(redis_url, trainer_address, tmp_path, lease_ttl_s=10) for _ in range(2)]
    try:
        await asyncio.gather(*(r.start() for r in replicas))
        jobs = {f"r{i:02d}": make_job(cpus=0.5, config={"steps": 2, "step_s": 0.02}) for i in range(40)}
        # Half the creates go to each replica, concurrently.
        await asyncio.gather(
            _create(replicas[0].address, dict(list(jobs.items())[::2])),
            _create(replicas[1].address, dict(list(jobs.items())[1::2])),
        )
        done = await _wait_all_terminal(replicas[0].address, jobs)
        assert all(j.state == J.JOB_STATE_SUCCEEDED for j in done.values())
        # Not even an idempotent second StartRun: exactly one claim per job.
        assert fake.start_calls == {f"{job_id}-attempt-1": 1 for job_id in jobs}
        assert fake.overlapping_jobs == set()
        claims = [r.log_path().read_text().count('"msg": "claimed jobs/') for r in replicas]
        assert sum(claims) == len(jobs)
        fault_figures.record(replicas=2, jobs_submitted=len(jobs),
                             jobs_lost=sum(j.state != J.JOB_STATE_SUCCEEDED for j in done.values()),
                             dispatches_duplicated=sum(claims) - len(jobs))
    finally:
        for replica in replicas:
            replica.stop()
        await trainer_server.stop(0.5)
