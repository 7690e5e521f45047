"""Experiments on a real Redis and the real job domain, with trial jobs moved by hand.

The dispatcher is left out on purpose: these tests drive trial jobs through the JobManager's
state machine the way the dispatcher would, so each bookkeeping rule (plan durable first,
slots, exactly-once trial creation, best trial, cancel, recovery) is seen on its own.
"""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from google.protobuf import json_format

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import experiment_pb2, job_pb2
from paddleray.services.common import errors, paging
from paddleray.services.common.identity import LOCAL, Identity, Role
from paddleray.services.scheduler import keys
from paddleray.services.scheduler.experiment_store import ExperimentStore
from paddleray.services.scheduler.experiments import ExperimentManager
from paddleray.services.scheduler.jobs import JobManager
from paddleray.services.scheduler.store import JobStore
from support.scheduler import make_job

pytestmark = pytest.mark.integration

J = job_pb2.JobState
E = experiment_pb2.ExperimentState


@pytest.fixture
async def client(redis_url):
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def sweep(client):
    jobs = JobManager(JobStore(client), stop_wait_s=0.5)
    manager = ExperimentManager(jobs, ExperimentStore(client))
    manager.register(jobs.hooks)
    yield manager
    await manager.stop()


def _grid(*values) -> experiment_pb2.ParameterDistribution:
    dist = experiment_pb2.ParameterDistribution()
    for value in values:
        dist.grid.values.add().number_value = value
    return dist


def make_experiment(lrs=(0.1, 0.2, 0.3, 0.4), max_concurrent=2, mode=common_pb2.METRIC_MODE_MAX, **fields):
    exp = experiment_pb2.Experiment(
        trial_template=make_job("pkg.train:main", config={"optimizer": {"name": "sgd"}, "epochs": 3}),
        metric="acc", mode=mode, max_concurrent_trials=max_concurrent, labels={"team": "vision"}, **fields,
    )
    exp.search_space.parameters["optimizer.lr"].CopyFrom(_grid(*lrs))
    return exp


async def _trials(manager: ExperimentManager, experiment_id: str) -> dict[int, job_pb2.Job]:
    trials = await manager.store.trials(experiment_id)
    return {i: (await manager.jobs.store.get(job_id)).job for i, job_id in trials.items()}


async def _finish(manager: ExperimentManager, job: job_pb2.Job, acc: float | None, end=J.JOB_STATE_SUCCEEDED):
    job_id = job.name.removeprefix("jobs/")
    await manager.jobs.transition(job_id, J.JOB_STATE_STARTING, "claimed")
    await manager.jobs.transition(job_id, J.JOB_STATE_RUNNING, "run started")
    if acc is not None:
        await manager.on_metrics(job.name, 1, common_pb2.MetricsReport(step=1, metrics={"acc": acc, "epoch": 1}))
    await manager.jobs.transition(job_id, end, "run ended")


async def test_the_template_is_checked_as_its_creator_and_the_trials_as_local(sweep):
    """The trials are created by the scheduler, not by a call: they name LOCAL as their caller,
    an argument (once, an acting_as block around create_trial)."""
    seen = []

    async def prepare(spec, field, *, caller):
        seen.append((field, caller))
        return spec

    sweep.jobs.prepare_spec = prepare
    with pytest.raises(TypeError, match="caller"):
        await sweep.create(make_experiment(), "sweep-nobody")  # type: ignore[call-arg]
    member = Identity("default", Role.MEMBER, "member")
    await sweep.create(make_experiment(lrs=(0.1, 0.2, 0.3), max_concurrent=2), "sweep-who", caller=member)
    assert seen == [("experiment.trial_template.spec", member), ("job.spec", LOCAL), ("job.spec", LOCAL)]


async def test_create_stores_the_plan_and_starts_only_max_concurrent_trials(sweep, client):
    exp = await sweep.create(make_experiment(), "sweep-a", caller=LOCAL)
    assert exp.name == "experiments/sweep-a" and exp.total_trials == 4 and exp.state == E.EXPERIMENT_STATE_RUNNING
    assert await client.hlen(keys.experiment_plan("sweep-a")) == 4
    trials = await _trials(sweep, "sweep-a")
    assert sorted(trials) == [0, 1]
    first = trials[0]
    assert first.name == "jobs/sweep-a-t0" and first.experiment == "experiments/sweep-a"
    assert first.trial_parameters == {"optimizer.lr": "0.1"}
    assert json_format.MessageToDict(first.spec.config) == {"optimizer": {"name": "sgd", "lr": 0.1}, "epochs": 3}
    assert first.labels["team"] == "vision" and first.state == J.JOB_STATE_QUEUED
    assert [(c.state, c.count) for c in exp.trials_by_state] == [(J.JOB_STATE_QUEUED, 2)]


async def test_trial_job_ids_of_a_long_experiment_id_stay_valid_job_ids(sweep):
    long_id = "a" + "b" * 62
    await sweep.create(make_experiment(lrs=(0.1, 0.2)), long_id, caller=LOCAL)
    trials = await sweep.store.trials(long_id)
    assert len(trials) == 2 and len(set(trials.values())) == 2
    for index, job_id in trials.items():
        assert len(job_id) <= 63 and job_id.endswith(f"-t{index}")
        assert (await sweep.jobs.get(f"jobs/{job_id}", caller=LOCAL)).experiment == f"experiments/{long_id}"


async def test_a_repeated_request_id_returns_the_first_experiment_and_a_taken_id_is_refused(sweep):
    first = await sweep.create(make_experiment(), "", request_id="req-1", caller=LOCAL)
    again = await sweep.create(make_experiment(), "", request_id="req-1", caller=LOCAL)
    assert again.name == first.name and again.total_trials == 4
    # The same request_id with another request: the key is taken (AIP-155), nothing is created.
    with pytest.raises(errors.AlreadyExists, match="^request_id: already used by a different request"):
        await sweep.create(make_experiment(lrs=(9.0,)), "", request_id="req-1", caller=LOCAL)
    with pytest.raises(errors.AlreadyExists, match="^request_id: already used by a different request"):
        await sweep.create(make_experiment(), "named", request_id="req-1", caller=LOCAL)
    assert [e.name for e in (await sweep.list(0, "", [], caller=LOCAL))[0]] == [first.name]
    with pytest.raises(errors.AlreadyExists):
        await sweep.create(make_experiment(), first.name.removeprefix("experiments/"), caller=LOCAL)


async def test_ending_trials_starts_the_next_ones_and_the_best_trial_wins(sweep):
    await sweep.create(make_experiment(), "sweep-b", caller=LOCAL)
    accs = {0: 0.5, 1: 0.9, 2: 0.7, 3: None}
    for _ in range(2):
        trials = await _trials(sweep, "sweep-b")
        for index, job in sorted(trials.items()):
            if job.state == J.JOB_STATE_QUEUED:
                await _finish(sweep, job, accs[index])
    exp = await sweep.get("experiments/sweep-b", caller=LOCAL)
    assert exp.state == E.EXPERIMENT_STATE_SUCCEEDED and exp.end_time.seconds > 0
    assert [(c.state, c.count) for c in exp.trials_by_state] == [(J.JOB_STATE_SUCCEEDED, 4)]
    assert exp.best_trial.job == "jobs/sweep-b-t1"
    assert exp.best_trial.metric_value == pytest.approx(0.9)
    assert json_format.MessageToDict(exp.best_trial.parameters) == {"optimizer.lr": 0.2}


async def test_min_mode_picks_the_smallest_and_no_metric_at_all_fails_the_experiment(sweep):
    await sweep.create(make_experiment(lrs=(0.1, 0.2), mode=common_pb2.METRIC_MODE_MIN), "sweep-min", caller=LOCAL)
    for index, job in (await _trials(sweep, "sweep-min")).items():
        await _finish(sweep, job, [0.3, 0.2][index])
    exp = await sweep.get("experiments/sweep-min", caller=LOCAL)
    assert exp.best_trial.job == "jobs/sweep-min-t1" and exp.best_trial.metric_value == pytest.approx(0.2)

    await sweep.create(make_experiment(lrs=(0.1,)), "sweep-none", caller=LOCAL)
    for job in (await _trials(sweep, "sweep-none")).values():
        await _finish(sweep, job, None, end=J.JOB_STATE_FAILED)
    exp = await sweep.get("experiments/sweep-none", caller=LOCAL)
    assert exp.state == E.EXPERIMENT_STATE_FAILED and "none reported" in exp.state_reason
    assert not exp.HasField("best_trial")


async def test_concurrent_fills_never_exceed_the_slots_nor_duplicate_a_trial(sweep, client):
    await sweep.create(make_experiment(lrs=tuple(range(10)), max_concurrent=3), "sweep-c", caller=LOCAL)
    others = [ExperimentManager(sweep.jobs, ExperimentStore(client)) for _ in range(4)]
    await asyncio.gather(*(m.fill("sweep-c") for m in others))
    assert sorted(await sweep.store.trials("sweep-c")) == [0, 1, 2]
    assert await client.scard(keys.experiment_active("sweep-c")) == 3


async def test_a_claim_whose_job_was_never_created_is_created_once_by_reconcile(sweep, client):
    await sweep.create(make_experiment(lrs=(0.1, 0.2, 0.3), max_concurrent=2), "sweep-d", caller=LOCAL)
    # As if a replica died right after handing out index 2 (its job never created), and
    # another right after creating index 1's job (never recorded).
    await client.hset(keys.experiment("sweep-d"), "max", 3)
    assert await sweep.store.claim_trial("sweep-d", "sweep-d-t") == 2
    await client.hdel(keys.experiment_trials("sweep-d"), "1")
    await sweep.reconcile()
    await sweep.reconcile()
    trials = await sweep.store.trials("sweep-d")
    assert trials == {0: "sweep-d-t0", 1: "sweep-d-t1", 2: "sweep-d-t2"}
    jobs, _ = await sweep.jobs.list(100, "", [], {}, "experiments/sweep-d", "", caller=LOCAL)
    assert sorted(j.name for j in jobs) == ["jobs/sweep-d-t0", "jobs/sweep-d-t1", "jobs/sweep-d-t2"]


async def test_reconcile_frees_slots_of_trials_that_ended_unseen(sweep, client):
    await sweep.create(make_experiment(lrs=(0.1, 0.2, 0.3), max_concurrent=1), "sweep-e", caller=LOCAL)
    hooks = sweep.jobs.hooks
    sweep.jobs.hooks = type(hooks)()  # a replica that died before its callback
    await sweep.jobs.transition("sweep-e-t0", J.JOB_STATE_CANCELLED, "gone")
    sweep.jobs.hooks = hooks
    assert sorted(await sweep.store.trials("sweep-e")) == [0]
    await sweep.reconcile()
    assert sorted(await sweep.store.trials("sweep-e")) == [0, 1]


async def test_reconcile_carries_out_an_asha_stop_decided_before_a_crash(sweep, client):
    exp = make_experiment(lrs=(0.1, 0.2), max_concurrent=2)
    exp.early_stopping.asha.CopyFrom(experiment_pb2.AshaPolicy(time_attr="epoch", max_t=9, grace_period=1))
    await sweep.create(exp, "sweep-h", caller=LOCAL)
    # The decision is durable, but the replica died before stopping the trial.
    await client.hset(keys.asha_stopped("sweep-h"), "1", "asha: decided before the crash")
    await sweep.reconcile()
    await asyncio.gather(*sweep._tasks)
    trials = await _trials(sweep, "sweep-h")
    assert trials[1].state == J.JOB_STATE_EARLY_STOPPED
    assert trials[1].state_reason == "asha: decided before the crash"
    assert trials[0].state == J.JOB_STATE_QUEUED


async def test_cancel_cancels_waiting_trials_and_creates_no_more(sweep):
    await sweep.create(make_experiment(lrs=(0.1, 0.2, 0.3, 0.4), max_concurrent=2), "sweep-f", caller=LOCAL)
    exp = await sweep.cancel("experiments/sweep-f", "enough", caller=LOCAL)
    assert exp.state == E.EXPERIMENT_STATE_CANCELLED and exp.state_reason == "enough"
    await asyncio.gather(*sweep._tasks)
    trials = await _trials(sweep, "sweep-f")
    assert sorted(trials) == [0, 1]
    assert {job.state for job in trials.values()} == {J.JOB_STATE_CANCELLED}
    assert (await sweep.cancel("experiments/sweep-f", caller=LOCAL)).state_reason == "enough"
    await sweep.delete("experiments/sweep-f", caller=LOCAL)
    with pytest.raises(errors.NotFound):
        await sweep.get("experiments/sweep-f", caller=LOCAL)
    assert await sweep.jobs.store.get("sweep-f-t0") is None


async def test_deleting_a_running_experiment_is_refused(sweep):
    await sweep.create(make_experiment(), "sweep-g", caller=LOCAL)
    with pytest.raises(errors.FailedPrecondition):
        await sweep.delete("experiments/sweep-g", caller=LOCAL)


async def test_list_is_newest_first_with_stable_pages_and_a_state_filter(sweep):
    for i in range(5):
        await sweep.create(make_experiment(lrs=(0.1,)), f"list-{i}", caller=LOCAL)
        await asyncio.sleep(0.002)
    await sweep.cancel("experiments/list-3", caller=LOCAL)
    page, token = await sweep.list(2, "", [], caller=LOCAL)
    assert [e.name for e in page] == ["experiments/list-4", "experiments/list-3"]
    await sweep.create(make_experiment(lrs=(0.1,)), "list-new", caller=LOCAL)
    page, token = await sweep.list(2, token, [], caller=LOCAL)
    assert [e.name for e in page] == ["experiments/list-2", "experiments/list-1"]
    cancelled, _ = await sweep.list(10, "", [E.EXPERIMENT_STATE_CANCELLED], caller=LOCAL)
    assert [e.name for e in cancelled] == ["experiments/list-3"]
    with pytest.raises(errors.InvalidArgument):
        await sweep.list(2, "garbage", [], caller=LOCAL)


async def test_list_coerces_a_large_page_size_and_binds_tokens_to_their_filters(sweep):
    for i in range(3):
        await sweep.create(make_experiment(lrs=(0.1,)), f"aip-{i}", caller=LOCAL)
    page, token = await sweep.list(paging.MAX_PAGE_SIZE + 1, "", [], caller=LOCAL)
    assert len(page) == 3 and token == "", "above the maximum is coerced, not rejected (AIP-158)"
    _, token = await sweep.list(1, "", [E.EXPERIMENT_STATE_RUNNING], caller=LOCAL)
    assert token
    with pytest.raises(errors.InvalidArgument, match="other filters"):
        await sweep.list(1, token, [], caller=LOCAL)
    page, _ = await sweep.list(1, token, [E.EXPERIMENT_STATE_RUNNING], caller=LOCAL)
    assert len(page) == 1


async def test_list_pages_of_large_experiments_end_early_by_bytes(sweep):
    for i in range(6):
        experiment = make_experiment(lrs=(0.1,), max_concurrent=1)
        experiment.trial_template.spec.config.update({"blob": "x" * 900_000})
        await sweep.create(experiment, f"big-{i}", caller=LOCAL)
    names, token, pages = [], "", 0
    while True:
        page, token = await sweep.list(0, token, [], caller=LOCAL)
        names += [e.name for e in page]
        pages += 1
        if not token:
            break
    assert sorted(names) == [f"experiments/big-{i}" for i in range(6)] and len(names) == 6
    assert pages >= 2


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda e: setattr(e, "metric", ""), "experiment.metric"),
        (lambda e: setattr(e, "mode", 0), "experiment.mode"),
        (lambda e: setattr(e, "max_concurrent_trials", -1), "experiment.max_concurrent_trials"),
        (lambda e: e.ClearField("trial_template"), "experiment.trial_template"),
        (lambda e: setattr(e.trial_template.spec, "entrypoint", "nope"), "experiment.trial_template.spec.entrypoint"),
        (lambda e: e.labels.update({"bad key!": "x"}), "experiment.labels['bad key!']"),
        (lambda e: e.search_space.parameters["optimizer.lr"].grid.ClearField("values"),
         "experiment.search_space.parameters[optimizer.lr].grid.values"),
        (lambda e: e.search_space.parameters["epochs.x"].CopyFrom(_grid(1)),
         "experiment.search_space.parameters[epochs.x]"),
        (lambda e: e.early_stopping.asha.CopyFrom(experiment_pb2.AshaPolicy(time_attr="epoch", max_t=1,
                                                                          grace_period=1)),
         "experiment.early_stopping.asha.max_t"),
        (lambda e: e.early_stopping.asha.CopyFrom(experiment_pb2.AshaPolicy(time_attr="epoch", max_t=100,
                                                                          grace_period=1, reduction_factor=1.000001)),
         "experiment.early_stopping.asha.reduction_factor"),
        (lambda e: e.search_space.parameters["optimizer.lr"].CopyFrom(_grid(0.1, float("nan"))),
         "experiment.search_space.parameters[optimizer.lr].grid.values[1]"),
        (lambda e: e.search_space.parameters["optimizer.lr"].CopyFrom(experiment_pb2.ParameterDistribution(
            uniform=experiment_pb2.Uniform(low=-1e308, high=1e308))),
         "experiment.search_space.parameters[optimizer.lr].uniform"),
        (lambda e: e.trial_template.spec.config.update({"big": "x" * 900_000}) or setattr(e, "num_samples", 300),
         "experiment.trial_template.spec.config"),
        (lambda e: setattr(e.trial_template.spec.runtime_env, "working_dir", "/" + "w" * 5000),
         "experiment.trial_template.spec.runtime_env.working_dir"),
    ],
)
async def test_bad_experiments_are_rejected_naming_the_field(sweep, client, change, field):
    exp = make_experiment()
    change(exp)
    with pytest.raises(errors.InvalidArgument) as info:
        await sweep.create(exp, "bad", caller=LOCAL)
    assert info.value.field == field
    assert await client.exists(keys.experiment("bad")) == 0


async def test_the_best_checkpoint_is_kept_as_offered_so_reading_replays_no_events(sweep, client):
    await sweep.create(make_experiment(lrs=(0.1,)), "sweep-ckpt", caller=LOCAL)
    (job,) = (await _trials(sweep, "sweep-ckpt")).values()
    await sweep.on_metrics(job.name, 1, common_pb2.MetricsReport(step=3, metrics={"acc": 0.8}))
    for epoch, acc in ((1, 0.5), (2, 0.8), (3, 0.8), (4, 0.6)):  # a tie keeps the older one
        checkpoint = common_pb2.Checkpoint(uri=f"mem://epoch-{epoch}", epoch=epoch, metrics={"acc": acc})
        await sweep.on_checkpoint(job.name, 1, checkpoint)
    await sweep.on_checkpoint(job.name, 1, common_pb2.Checkpoint(uri="mem://no-metric", epoch=5))
    # Reading the experiment needs none of the trial's events.
    await client.delete(keys.events(job.name.removeprefix("jobs/")))
    best = (await sweep.get("experiments/sweep-ckpt", caller=LOCAL)).best_trial
    assert best.job == job.name and best.checkpoint.uri == "mem://epoch-2"
