"""ASHA: the pure decision rule, its validation, and its Redis-persisted rung state."""

from __future__ import annotations

import asyncio
import math

import pytest
import redis.asyncio as aioredis

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import experiment_pb2
from paddleray.services.common.errors import InvalidArgument
from paddleray.services.scheduler import asha, keys

pytestmark = pytest.mark.unit

MAX = 1
MIN = -1


def _config(grace=1, rf=3.0, max_t=9, sign=MAX) -> asha.AshaConfig:
    return asha.AshaConfig(
        time_attr="epoch", max_t=max_t, grace_period=grace, reduction_factor=rf, metric="acc", sign=sign
    )


def _report(epoch: float, acc: float) -> common_pb2.MetricsReport:
    return common_pb2.MetricsReport(step=int(epoch) * 10, metrics={"epoch": epoch, "acc": acc})


@pytest.mark.parametrize(
    ("grace", "rf", "max_t", "milestones"),
    [(1, 3.0, 9, [1, 3]), (1, 2.0, 16, [1, 2, 4, 8]), (2, 4.0, 100, [2, 8, 32]), (1, 2.5, 10, [1, 3, 7])],
)
def test_rungs_sit_at_grace_period_times_powers_of_the_reduction_factor_below_max_t(grace, rf, max_t, milestones):
    assert _config(grace, rf, max_t).milestones == milestones


def test_first_trial_at_a_rung_continues_and_is_recorded():
    decision = asha.decide(_config(), {}, "t0", 1, 0.5)
    assert decision == asha.Decision(stop=False, milestone=1, value=0.5)


def test_trial_below_the_rung_cutoff_stops_with_a_reason_and_one_above_continues():
    rungs = {1: {"a": 0.9}}
    stopped = asha.decide(_config(), rungs, "b", 1, 0.3)
    assert stopped.stop and stopped.milestone == 1
    assert "acc=0.3" in stopped.reason and "rung 1" in stopped.reason and "cutoff 0.9" in stopped.reason
    assert asha.decide(_config(), rungs, "c", 1, 0.95) == asha.Decision(stop=False, milestone=1, value=0.95)


def test_min_mode_keeps_the_smaller_values():
    rungs = {1: {"a": -0.2}}  # recorded as sign * loss
    assert asha.decide(_config(sign=MIN), rungs, "b", 1, 0.5).stop
    assert not asha.decide(_config(sign=MIN), rungs, "c", 1, 0.1).stop


def test_cutoff_is_the_top_one_over_reduction_factor_percentile():
    rungs = {1: {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}}
    config = _config(rf=4.0, max_t=64)
    # 75th percentile of 1, 2, 3, 4 with linear interpolation is 3.25.
    assert asha.decide(config, rungs, "e", 1, 3.2).stop
    assert not asha.decide(config, rungs, "e", 1, 3.3).stop


def test_before_the_grace_period_nothing_is_recorded_or_stopped():
    assert asha.decide(_config(grace=2), {2: {"a": 100.0}}, "b", 1, 0.0) == asha.CONTINUE


def test_a_rung_judges_a_trial_once():
    rungs = {1: {"a": 0.9, "b": 0.1}}
    assert asha.decide(_config(), rungs, "b", 2, 0.1) == asha.CONTINUE


def test_a_trial_past_several_milestones_is_judged_at_the_highest():
    decision = asha.decide(_config(grace=1, rf=2, max_t=16), {4: {"a": 1.0}, 1: {"a": 0.0}}, "b", 5, 0.5)
    assert decision.stop and decision.milestone == 4


def test_reaching_max_t_stops():
    decision = asha.decide(_config(max_t=9), {}, "a", 9, 1.0)
    assert decision.stop and "max_t" in decision.reason


def test_nan_metric_is_recorded_but_never_cuts():
    decision = asha.decide(_config(), {1: {"a": 0.5}}, "b", 1, math.nan)
    assert not decision.stop and decision.milestone == 1
    assert not asha.decide(_config(), {1: {"a": 0.5, "b": math.nan}}, "c", 1, 0.6).stop


def test_progress_reads_time_attr_and_step_falls_back_to_the_report_step():
    assert asha.progress(_config(), _report(3, 0.1)) == 3
    step_config = asha.AshaConfig("step", 100, 1, 3.0, "acc", MAX)
    assert asha.progress(step_config, common_pb2.MetricsReport(step=7, metrics={"acc": 1})) == 7
    assert asha.progress(_config(), common_pb2.MetricsReport(step=7, metrics={"acc": 1})) is None


def _experiment(**policy) -> experiment_pb2.Experiment:
    base = {"time_attr": "epoch", "max_t": 9, "grace_period": 1, "reduction_factor": 3.0}
    base.update(policy)
    exp = experiment_pb2.Experiment(metric="acc", mode=common_pb2.METRIC_MODE_MAX)
    exp.early_stopping.asha.CopyFrom(experiment_pb2.AshaPolicy(**base))
    return exp


def test_config_from_proto_defaults_the_reduction_factor_and_reads_the_mode():
    exp = _experiment(reduction_factor=0)
    exp.mode = common_pb2.METRIC_MODE_MIN
    config = asha.config_from_proto(exp)
    assert config.reduction_factor == 4.0 and config.sign == MIN
    assert asha.config_from_proto(experiment_pb2.Experiment()) is None


@pytest.mark.parametrize(
    ("policy", "field", "rule"),
    [
        ({"time_attr": ""}, "experiment.early_stopping.asha.time_attr", "must name"),
        ({"grace_period": 0}, "experiment.early_stopping.asha.grace_period", ">= 1"),
        ({"max_t": 1}, "experiment.early_stopping.asha.max_t", "> grace_period"),
        ({"reduction_factor": 1.0}, "experiment.early_stopping.asha.reduction_factor", "> 1"),
        ({"reduction_factor": math.inf}, "experiment.early_stopping.asha.reduction_factor", "> 1"),
        # Rungs without end: 1.000001 froze the scheduler computing them at every report.
        ({"reduction_factor": 1.000001, "max_t": 100}, "experiment.early_stopping.asha.reduction_factor", "rungs"),
        ({"reduction_factor": 1.01, "max_t": 10**6}, "experiment.early_stopping.asha.reduction_factor", "rungs"),
        ({"reduction_factor": 1e9}, "experiment.early_stopping.asha.reduction_factor", "at most"),
        ({"max_t": 2**62}, "experiment.early_stopping.asha.max_t", "at most"),
    ],
)
def test_bad_policies_are_rejected_naming_the_field(policy, field, rule):
    with pytest.raises(InvalidArgument) as info:
        asha.config_from_proto(_experiment(**policy))
    assert info.value.field == field and rule in info.value.rule


def test_early_stopping_needs_a_metric_and_a_mode():
    exp = _experiment()
    exp.mode = common_pb2.METRIC_MODE_UNSPECIFIED
    with pytest.raises(InvalidArgument) as info:
        asha.config_from_proto(exp)
    assert info.value.field == "experiment.mode"
    exp = _experiment()
    exp.metric = ""
    with pytest.raises(InvalidArgument) as info:
        asha.config_from_proto(exp)
    assert info.value.field == "experiment.metric"


@pytest.fixture
async def redis(redis_url):
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


def _state(redis, config=None) -> asha.AshaState:
    return asha.AshaState(redis, keys.asha_rungs("e1"), keys.asha_stopped("e1"), config or _config())


async def test_state_records_rungs_and_stops_in_redis(redis):
    state = _state(redis)
    assert not (await state.on_report("0", _report(1, 0.9))).stop
    stopped = await state.on_report("1", _report(1, 0.2))
    assert stopped.stop
    assert await redis.hgetall(keys.asha_rungs("e1")) == {b"1|0": b"0.9", b"1|1": b"0.2"}
    assert await redis.hgetall(keys.asha_stopped("e1")) == {b"1": stopped.reason.encode()}


async def test_a_restarted_state_gives_the_same_answer_to_a_replayed_report(redis):
    first = _state(redis)
    await first.on_report("0", _report(1, 0.5))
    kept = await first.on_report("1", _report(1, 0.6))
    stopped = await first.on_report("2", _report(1, 0.1))
    # The rung grows after the decisions; a fresh state (a restarted scheduler) replays the reports.
    await first.on_report("3", _report(1, 0.99))
    restarted = _state(redis)
    assert await restarted.on_report("2", _report(1, 0.1)) == asha.Decision(stop=True, reason=stopped.reason)
    assert not (await restarted.on_report("1", _report(1, 0.6))).stop
    assert kept.milestone == 1
    assert await restarted.rungs() == {1: {"0": 0.5, "1": 0.6, "2": 0.1, "3": 0.99}}


async def test_reports_without_the_metric_or_time_attr_are_ignored(redis):
    state = _state(redis)
    assert await state.on_report("0", common_pb2.MetricsReport(metrics={"acc": 1.0})) == asha.CONTINUE
    assert await state.on_report("0", common_pb2.MetricsReport(metrics={"epoch": 1.0})) == asha.CONTINUE
    assert await redis.exists(keys.asha_rungs("e1")) == 0


async def test_concurrent_reports_from_several_clients_all_land_in_the_rung(redis, redis_url):
    clients = [aioredis.Redis.from_url(redis_url) for _ in range(4)]
    states = [_state(client) for client in clients]
    await asyncio.gather(*(states[i % 4].on_report(str(i), _report(1, i / 20)) for i in range(20)))
    rungs = await _state(redis).rungs()
    assert sorted(rungs[1], key=int) == [str(i) for i in range(20)]
    for client in clients:
        await client.aclose()


def test_the_bounds_leave_the_rungs_few_and_quick_to_compute():
    config = asha.config_from_proto(_experiment(reduction_factor=1.2, max_t=10**5, grace_period=1))
    assert config is not None and len(config.milestones) <= asha.MAX_RUNGS
