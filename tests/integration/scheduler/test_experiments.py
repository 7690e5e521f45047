"""Sweeps end to end over gRPC: ExperimentService -> trial jobs -> dispatcher -> trainer.

The scheduler runs in process (real gRPC server, real Redis); the trainer is the scripted
fake speaking real gRPC, whose trial runs report an accuracy derived from their lr.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass

import grpc
import pytest
from google.protobuf import json_format
from grpc import aio

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import experiment_pb2, experiment_service_pb2_grpc, job_pb2, job_service_pb2_grpc
from paddleray.scheduler.v1 import experiment_service_pb2 as es
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.services.common.server import start_server, stop_server
from paddleray.services.scheduler.__main__ import registrations
from paddleray.services.scheduler.app import SchedulerApp
from paddleray.services.scheduler.settings import SchedulerSettings
from paddleray.trainer.v1 import run_pb2
from support.fake_trainer import start_fake_trainer
from support.scheduler import make_job
from support.sweep_trainer import SweepTrainer, trial_score

pytestmark = pytest.mark.integration

J = job_pb2.JobState
E = experiment_pb2.ExperimentState


@dataclass
class SweepStack:
    fake: SweepTrainer
    app: SchedulerApp
    experiments: experiment_service_pb2_grpc.ExperimentServiceStub
    jobs: job_service_pb2_grpc.JobServiceStub
    trainer_address: str

    async def create(self, experiment: experiment_pb2.Experiment, experiment_id: str = "") -> experiment_pb2.Experiment:
        request = es.CreateExperimentRequest(experiment=experiment, experiment_id=experiment_id)
        return (await self.experiments.CreateExperiment(request)).experiment

    async def get(self, name: str) -> experiment_pb2.Experiment:
        return (await self.experiments.GetExperiment(es.GetExperimentRequest(name=name))).experiment

    async def wait_ended(self, name: str, timeout: float = 90) -> experiment_pb2.Experiment:
        async with asyncio.timeout(timeout):
            while (exp := await self.get(name)).state == E.EXPERIMENT_STATE_RUNNING:
                await asyncio.sleep(0.05)
        return exp

    async def trials(self, name: str) -> list[job_pb2.Job]:
        response = await self.jobs.ListJobs(js.ListJobsRequest(experiment=name, page_size=1000))
        return sorted(response.jobs, key=lambda j: j.name)


@pytest.fixture
def sweep_stack(redis_url):
    """`async with sweep_stack() as stack`; pass (fake, trainer_address) to put a second
    replica in front of the same trainer and Redis."""

    @contextlib.asynccontextmanager
    async def make(shared: tuple[SweepTrainer, str] | None = None):
        trainer_server = None
        if shared is None:
            fake = SweepTrainer()
            trainer_server, trainer_address = await start_fake_trainer(fake)
        else:
            fake, trainer_address = shared
        config = SchedulerSettings(
            redis_url=redis_url, trainer_address=trainer_address, dispatch_interval_s=0.05, lease_ttl_s=3,
            stop_wait_s=10, entrypoint_allowlist=["pkg"],
        )
        app = SchedulerApp(config)
        server = await start_server(config, registrations(app))
        await app.start()
        channel = aio.insecure_channel(f"127.0.0.1:{server.port}")
        try:
            yield SweepStack(fake, app, experiment_service_pb2_grpc.ExperimentServiceStub(channel),
                             job_service_pb2_grpc.JobServiceStub(channel), trainer_address)
        finally:
            await channel.close()
            await stop_server(server, 0.5)
            await app.stop()
            if trainer_server is not None:
                await trainer_server.stop(0.5)

    return make


def _grid(*values) -> experiment_pb2.ParameterDistribution:
    dist = experiment_pb2.ParameterDistribution()
    for value in values:
        dist.grid.values.add().number_value = value
    return dist


def sweep(lrs, *, max_concurrent=2, epochs=3, epoch_s=0.03, **fields) -> experiment_pb2.Experiment:
    exp = experiment_pb2.Experiment(
        trial_template=make_job("pkg.train:main", cpus=1, config={"epochs": epochs, "epoch_s": epoch_s}),
        metric="acc", mode=common_pb2.METRIC_MODE_MAX, max_concurrent_trials=max_concurrent, **fields,
    )
    exp.search_space.parameters["lr"].CopyFrom(_grid(*lrs))
    return exp


def _lr(job: job_pb2.Job) -> float:
    return json.loads(job.trial_parameters["lr"])


async def test_grid_sweep_runs_every_trial_within_max_concurrent_and_reports_the_best(sweep_stack):
    lrs = (0.05, 0.6, 0.3, 0.45, 0.1, 0.2)
    async with sweep_stack() as stack:
        created = await stack.create(sweep(lrs, max_concurrent=2), "grid")
        assert created.total_trials == 6 and created.state == E.EXPERIMENT_STATE_RUNNING
        done = await stack.wait_ended(created.name)
        assert done.state == E.EXPERIMENT_STATE_SUCCEEDED, done.state_reason
        assert [(c.state, c.count) for c in done.trials_by_state] == [(J.JOB_STATE_SUCCEEDED, 6)]
        # The trainer never had more than two trial runs at once, and did have two.
        assert stack.fake.max_in_flight == 2
        trials = await stack.trials(created.name)
        assert sorted(_lr(t) for t in trials) == sorted(lrs)
        assert len(stack.fake.runs) == 6
        best = next(t for t in trials if _lr(t) == 0.3)
        assert done.best_trial.job == best.name
        assert done.best_trial.metric_value == pytest.approx(trial_score(0.3))
        assert json_format.MessageToDict(done.best_trial.parameters) == {"lr": 0.3}
        assert done.best_trial.checkpoint.uri.endswith("epoch-3")
        assert done.best_trial.checkpoint.uri == best.latest_checkpoint.uri


async def test_the_best_trial_points_at_its_best_checkpoint_not_its_newest(sweep_stack):
    exp = sweep((0.3, 0.1), epochs=5)
    exp.trial_template.spec.config.update({"overfit_after": 3})
    async with sweep_stack() as stack:
        done = await stack.wait_ended((await stack.create(exp, "overfit")).name)
        assert done.best_trial.metric_value == pytest.approx(trial_score(0.3) * 3 / 5)
        assert done.best_trial.checkpoint.uri.endswith("epoch-3") and done.best_trial.checkpoint.epoch == 3
        best = next(t for t in await stack.trials(done.name) if t.name == done.best_trial.job)
        assert best.latest_checkpoint.uri.endswith("epoch-5")


async def test_among_tied_checkpoints_the_best_trial_points_at_the_first(sweep_stack):
    # The rule of init_from.job and of the trainer's retention (and so of an export from the
    # job): a retrain from "the best trial" starts from the checkpoint the experiment shows.
    exp = sweep((0.3, 0.1), epochs=5)
    exp.trial_template.spec.config.update({"plateau_after": 2})
    async with sweep_stack() as stack:
        done = await stack.wait_ended((await stack.create(exp, "plateau")).name)
        assert done.best_trial.metric_value == pytest.approx(trial_score(0.3) * 2 / 5)
        assert done.best_trial.checkpoint.uri.endswith("epoch-2") and done.best_trial.checkpoint.epoch == 2


async def test_two_replicas_share_a_sweep_without_duplicates_or_extra_concurrency(sweep_stack):
    lrs = tuple(round(0.05 * i, 2) for i in range(1, 11))
    async with sweep_stack() as first:
        async with sweep_stack(shared=(first.fake, first.trainer_address)) as second:
            created = await first.create(sweep(lrs, max_concurrent=2, epochs=3, epoch_s=0.03), "two")
            done = await second.wait_ended(created.name)
            assert done.state == E.EXPERIMENT_STATE_SUCCEEDED
            trials = await second.trials(created.name)
            assert sorted(_lr(t) for t in trials) == sorted(lrs)
            assert all(t.state == J.JOB_STATE_SUCCEEDED for t in trials)
            # One trainer run per trial, whichever replica dispatched it, never more than 2 at once.
            assert sorted(r.run.job for r in first.fake.runs.values()) == sorted(t.name for t in trials)
            assert first.fake.max_in_flight <= 2


async def test_random_sweep_draws_num_samples_trials_and_a_seed_repeats_them(sweep_stack):
    def random_sweep(seed):
        exp = sweep((), max_concurrent=0, epochs=1, num_samples=4, seed=seed)
        exp.search_space.parameters["lr"].CopyFrom(
            experiment_pb2.ParameterDistribution(log_uniform=experiment_pb2.LogUniform(low=0.01, high=1.0))
        )
        exp.search_space.parameters["model.layers"].CopyFrom(
            experiment_pb2.ParameterDistribution(randint=experiment_pb2.RandInt(low=1, high=5))
        )
        return exp

    async with sweep_stack() as stack:
        first = await stack.create(random_sweep(7), "rand-a")
        again = await stack.create(random_sweep(7), "rand-b")
        assert first.total_trials == again.total_trials == 4
        for name in (first.name, again.name):
            assert (await stack.wait_ended(name)).state == E.EXPERIMENT_STATE_SUCCEEDED
        a = [dict(t.trial_parameters) for t in await stack.trials(first.name)]
        b = [dict(t.trial_parameters) for t in await stack.trials(again.name)]
        assert a == b and len({json.dumps(p, sort_keys=True) for p in a}) == 4
        trial = (await stack.trials(first.name))[0]
        config = json_format.MessageToDict(trial.spec.config)
        assert config["model"]["layers"] == json.loads(trial.trial_parameters["model.layers"])
        assert config["lr"] == json.loads(trial.trial_parameters["lr"]) and config["epochs"] == 1


async def test_asha_stops_the_bad_trials_early_and_the_best_survives(sweep_stack):
    # The best trial comes first, so that ASHA (asynchronous: early arrivals are never cut)
    # has its value in the rungs when the others arrive.
    lrs = (0.3, 0.05, 0.6, 0.1, 0.55, 0.2, 0.5, 0.15)
    epochs = 8
    exp = sweep(lrs, max_concurrent=2, epochs=epochs, epoch_s=0.05)
    exp.early_stopping.asha.CopyFrom(
        experiment_pb2.AshaPolicy(time_attr="epoch", grace_period=1, reduction_factor=3, max_t=9)
    )
    async with sweep_stack() as stack:
        created = await stack.create(exp, "asha")
        done = await stack.wait_ended(created.name)
        assert done.state == E.EXPERIMENT_STATE_SUCCEEDED
        trials = {_lr(t): t for t in await stack.trials(created.name)}
        assert trials[0.3].state == J.JOB_STATE_SUCCEEDED
        assert done.best_trial.job == trials[0.3].name
        stopped = [t for t in trials.values() if t.state == J.JOB_STATE_EARLY_STOPPED]
        assert len(stopped) >= 3
        for trial in stopped:
            assert trial.state_reason.startswith("asha: acc=") and "rung" in trial.state_reason
            assert trial.latest_metrics.metrics["epoch"] < epochs
        # The cut trials' runs were stopped on the trainer, so less was computed.
        assert stack.fake.epochs_run < len(lrs) * epochs
        assert {stack.fake.runs[t.attempts[-1].run].run.state for t in stopped} == {7}  # RUN_STATE_STOPPED


async def test_cancelling_an_experiment_cancels_its_trials_and_starts_no_more(sweep_stack):
    async with sweep_stack() as stack:
        created = await stack.create(sweep((0.1, 0.2, 0.3, 0.4), max_concurrent=2, epochs=1000, epoch_s=0.05), "stop")
        async with asyncio.timeout(30):
            while sum(t.state == J.JOB_STATE_RUNNING for t in await stack.trials(created.name)) < 2:
                await asyncio.sleep(0.05)
        response = await stack.experiments.CancelExperiment(es.CancelExperimentRequest(name=created.name, reason="enough"))
        assert response.experiment.state == E.EXPERIMENT_STATE_CANCELLED
        assert response.experiment.state_reason == "enough"
        async with asyncio.timeout(30):
            while any(t.state != J.JOB_STATE_CANCELLED for t in await stack.trials(created.name)):
                await asyncio.sleep(0.05)
        trials = await stack.trials(created.name)
        assert len(trials) == 2 and len(stack.fake.runs) == 2
        assert all(r.run.state == run_pb2.RUN_STATE_STOPPED for r in stack.fake.runs.values())
        done = await stack.get(created.name)
        assert [(c.state, c.count) for c in done.trials_by_state] == [(J.JOB_STATE_CANCELLED, 2)]
        await stack.experiments.DeleteExperiment(es.DeleteExperimentRequest(name=created.name))
        assert await stack.trials(created.name) == []


async def test_errors_carry_their_status_codes(sweep_stack):
    async with sweep_stack() as stack:
        bad = sweep((0.1,))
        bad.search_space.parameters["wd"].CopyFrom(
            experiment_pb2.ParameterDistribution(log_uniform=experiment_pb2.LogUniform(low=0, high=1))
        )
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stack.create(bad)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.details() == "experiment.search_space.parameters[wd].log_uniform.low: must be > 0"
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stack.get("experiments/nope")
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        running = await stack.create(sweep((0.1,), epochs=1000), "busy")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stack.experiments.DeleteExperiment(es.DeleteExperimentRequest(name=running.name))
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        listed = await stack.experiments.ListExperiments(es.ListExperimentsRequest())
        assert [e.name for e in listed.experiments] == ["experiments/busy"]
        await stack.experiments.CancelExperiment(es.CancelExperimentRequest(name=running.name))
