"""A sweep survives SIGKILL of its scheduler: no trial lost, none duplicated, none run twice.

The scheduler runs as a real process (python -m paddleray.services.scheduler) on the test's
Redis, in front of the scripted trainer served from this test's event loop; it is killed with
SIGKILL twice mid-sweep (while trials run, and while some end unseen) and started again.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time

import pytest
from grpc import aio

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import experiment_pb2, experiment_service_pb2_grpc, job_pb2, job_service_pb2_grpc
from paddleray.scheduler.v1 import experiment_service_pb2 as es
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.trainer.v1 import run_pb2
from support.fake_trainer import TERMINAL, start_fake_trainer
from support.scheduler import SchedulerProcess, make_job
from support.sweep_trainer import SweepTrainer

pytestmark = pytest.mark.integration

E = experiment_pb2.ExperimentState
J = job_pb2.JobState


def _sweep(lrs) -> experiment_pb2.Experiment:
    exp = experiment_pb2.Experiment(
        trial_template=make_job("pkg.train:main", cpus=1, config={"epochs": 4, "epoch_s": 0.1}),
        metric="acc", mode=common_pb2.METRIC_MODE_MAX, max_concurrent_trials=2,
    )
    for lr in lrs:
        exp.search_space.parameters["lr"].grid.values.add().number_value = lr
    return exp


async def _until(predicate, timeout: float = 60) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


async def _timed(started) -> float:
    """Seconds until the awaitable `started` (a scheduler start) is done."""
    begin = time.monotonic()
    await started
    return time.monotonic() - begin


async def test_sigkill_mid_sweep_loses_and_duplicates_no_trial(redis_url, tmp_path, fault_figures):
    fake = SweepTrainer()
    trainer_server, trainer_address = await start_fake_trainer(fake)
    scheduler = SchedulerProcess(redis_url, trainer_address, tmp_path)
    lrs = [round(0.05 * i, 2) for i in range(1, 11)]

    def finished_runs() -> int:
        return sum(r.run.state == run_pb2.RUN_STATE_SUCCEEDED for r in fake.runs.values())

    try:
        await scheduler.start()
        channel = aio.insecure_channel(f"127.0.0.1:{scheduler.port}")
        experiments = experiment_service_pb2_grpc.ExperimentServiceStub(channel)
        created = (await experiments.CreateExperiment(
            es.CreateExperimentRequest(experiment=_sweep(lrs), experiment_id="crash")
        )).experiment
        assert created.total_trials == len(lrs)

        # First kill while two trials run; their runs go on and end while nobody watches.
        await _until(lambda: finished_runs() >= 2 and len(fake.live()) == 2)
        scheduler.kill()
        await _until(lambda: not fake.live())
        restarts_s = [await _timed(scheduler.start())]
        # Second kill a little later, in whatever the restarted replica is doing.
        await _until(lambda: finished_runs() >= 5)
        await asyncio.sleep(0.15)
        scheduler.kill()
        await asyncio.sleep(0.3)
        restarts_s.append(await _timed(scheduler.start()))

        async with asyncio.timeout(120):
            while True:
                exp = (await experiments.GetExperiment(es.GetExperimentRequest(name=created.name))).experiment
                if exp.state != E.EXPERIMENT_STATE_RUNNING:
                    break
                await asyncio.sleep(0.1)
        assert exp.state == E.EXPERIMENT_STATE_SUCCEEDED, exp.state_reason

        jobs = job_service_pb2_grpc.JobServiceStub(channel)
        trials = (await jobs.ListJobs(js.ListJobsRequest(experiment=created.name, page_size=1000))).jobs
        # Exactly one job per planned trial: none lost, none duplicated.
        assert sorted(t.name for t in trials) == sorted(f"jobs/crash-t{i}" for i in range(len(lrs)))
        assert sorted(json.loads(t.trial_parameters["lr"]) for t in trials) == lrs
        assert all(t.state == J.JOB_STATE_SUCCEEDED for t in trials), [(t.name, t.state_reason) for t in trials]
        assert [(c.state, c.count) for c in exp.trials_by_state] == [(J.JOB_STATE_SUCCEEDED, len(lrs))]
        # Each trial ran once on the trainer, never two trainer runs of one trial, and never
        # more than max_concurrent_trials runs at once, across both restarts.
        runs_per_job = collections.Counter(r.run.job for r in fake.runs.values())
        assert runs_per_job == {t.name: 1 for t in trials}
        assert all(r.run.state in TERMINAL for r in fake.runs.values())
        assert fake.max_in_flight <= 2
        assert exp.best_trial.job == "jobs/crash-t5"  # lr 0.3, the best score
        planned = {f"jobs/crash-t{i}" for i in range(len(lrs))}
        fault_figures.record(
            faults_injected=2, trials_submitted=len(lrs),
            trials_lost=len(planned - {t.name for t in trials}),
            trials_duplicated=len(trials) - len({t.name for t in trials}) + sum(n - 1 for n in runs_per_job.values()),
            restart_to_answering_s=round(max(restarts_s), 2),
        )
        await channel.close()
    finally:
        scheduler.stop()
        await trainer_server.stop(0.5)
