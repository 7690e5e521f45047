"""ASHA (asynchronous successive halving) for sweep trials: the rule and its durable state.

The rule is Ray Tune's AsyncHyperBandScheduler with one bracket: rungs sit at
grace_period * reduction_factor**k below max_t. The first report of a trial at or past a
rung's milestone is recorded in that rung, and the trial stops when its value is below the
(1 - 1/reduction_factor) percentile of the values recorded there before it. A trial that
reaches max_t has used its budget and stops too.

`decide` is pure. `AshaState` keeps the rungs in Redis together with every decision taken, so
that a restarted scheduler (or one that sees a report again after re-attaching to a run) gives
the same answer for the same report instead of re-judging it against a rung that has grown.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import redis.asyncio as aioredis
from redis.exceptions import WatchError

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import experiment_pb2
from paddleray.services.common.errors import InvalidArgument

DEFAULT_REDUCTION_FACTOR = 4.0
# Bounds that keep the rungs few enough to compute and to judge every report against.
MAX_REDUCTION_FACTOR = 1000.0
MAX_RUNGS = 64
MAX_T = 10**12
_FIELD = "experiment.early_stopping.asha"


@dataclass(frozen=True)
class AshaConfig:
    time_attr: str
    max_t: int
    grace_period: int
    reduction_factor: float
    metric: str
    # +1 when larger is better, -1 when smaller is better: values are compared as sign * metric.
    sign: int

    @property
    def milestones(self) -> list[int]:
        """Rung milestones, lowest first."""
        result = []
        milestone = float(self.grace_period)
        while milestone < self.max_t:
            result.append(int(math.ceil(milestone)))
            milestone *= self.reduction_factor
        return sorted(set(result))


def config_from_proto(experiment: experiment_pb2.Experiment) -> AshaConfig | None:
    """The experiment's ASHA config, validated; None when it has no early stopping."""
    if experiment.early_stopping.WhichOneof("policy") != "asha":
        return None
    policy = experiment.early_stopping.asha
    if not policy.time_attr:
        raise InvalidArgument(f"{_FIELD}.time_attr", "must name a reported metric")
    if policy.grace_period < 1:
        raise InvalidArgument(f"{_FIELD}.grace_period", "must be >= 1")
    if policy.max_t <= policy.grace_period:
        raise InvalidArgument(f"{_FIELD}.max_t", "must be > grace_period")
    if policy.max_t > MAX_T:
        raise InvalidArgument(f"{_FIELD}.max_t", f"must be at most {MAX_T}")
    factor = policy.reduction_factor or DEFAULT_REDUCTION_FACTOR
    if not (math.isfinite(factor) and 1 < factor <= MAX_REDUCTION_FACTOR):
        raise InvalidArgument(f"{_FIELD}.reduction_factor", f"must be > 1 and at most {MAX_REDUCTION_FACTOR:g}")
    rungs = math.ceil(math.log(policy.max_t / policy.grace_period) / math.log(factor))
    if rungs > MAX_RUNGS:
        # A factor just above 1 makes rungs without end: every report is judged against each.
        raise InvalidArgument(
            f"{_FIELD}.reduction_factor",
            f"gives {rungs} rungs from grace_period {policy.grace_period} to max_t {policy.max_t}; at most {MAX_RUNGS}"
            " (use a larger factor or a smaller max_t / grace_period ratio)",
        )
    if not experiment.metric:
        raise InvalidArgument("experiment.metric", "must be set when early stopping is used")
    if experiment.mode not in (common_pb2.METRIC_MODE_MIN, common_pb2.METRIC_MODE_MAX):
        raise InvalidArgument("experiment.mode", "must be METRIC_MODE_MIN or METRIC_MODE_MAX")
    return AshaConfig(
        time_attr=policy.time_attr,
        max_t=policy.max_t,
        grace_period=policy.grace_period,
        reduction_factor=factor,
        metric=experiment.metric,
        sign=1 if experiment.mode == common_pb2.METRIC_MODE_MAX else -1,
    )


@dataclass(frozen=True)
class Decision:
    stop: bool
    # Rung the report was recorded in, if any.
    milestone: int | None = None
    # Value recorded (sign * metric).
    value: float | None = None
    reason: str = ""


CONTINUE = Decision(stop=False)


def progress(config: AshaConfig, report: common_pb2.MetricsReport) -> float | None:
    """The report's time_attr; "step" falls back to the report's own step counter."""
    if config.time_attr in report.metrics:
        return report.metrics[config.time_attr]
    if config.time_attr == "step":
        return float(report.step)
    return None


def decide(
    config: AshaConfig, rungs: Mapping[int, Mapping[str, float]], trial: str, t: float, metric: float
) -> Decision:
    """What to do with `trial` reporting `metric` at progress `t`, given the rungs so far.

    rungs maps each milestone to {trial: sign * metric} recorded there. Pure.
    """
    if t >= config.max_t:
        return Decision(stop=True, reason=f"asha: reached max_t ({config.time_attr}={t:g} >= {config.max_t})")
    value = config.sign * metric
    # Highest rung first: a trial that jumped past several milestones is judged once, at the top.
    for milestone in reversed(config.milestones):
        recorded = rungs.get(milestone, {})
        if t < milestone or trial in recorded:
            continue
        others = [v for v in recorded.values() if not math.isnan(v)]
        if others and not math.isnan(value):
            cutoff = float(np.percentile(others, (1 - 1 / config.reduction_factor) * 100))
            if value < cutoff:
                return Decision(
                    stop=True,
                    milestone=milestone,
                    value=value,
                    reason=(
                        f"asha: {config.metric}={metric:g} at {config.time_attr}={t:g} is below the top "
                        f"1/{config.reduction_factor:g} of {len(others)} trials at rung {milestone} "
                        f"(cutoff {config.sign * cutoff:g})"
                    ),
                )
        return Decision(stop=False, milestone=milestone, value=value)
    return CONTINUE


class AshaState:
    """One experiment's rungs and decisions in Redis.

    Keys (built by the caller from keys.py): `rungs_key` is a hash "milestone|trial" -> value,
    `stopped_key` a hash trial -> reason of the stop.
    """

    def __init__(self, redis: aioredis.Redis, rungs_key: str, stopped_key: str, config: AshaConfig) -> None:
        self._redis = redis
        self._rungs_key = rungs_key
        self._stopped_key = stopped_key
        self._config = config

    async def rungs(self) -> dict[int, dict[str, float]]:
        raw = await self._redis.hgetall(self._rungs_key)
        return _parse_rungs(raw)

    async def on_report(self, trial: str, report: common_pb2.MetricsReport) -> Decision:
        """Records the report in its rung and returns the decision, atomically (WATCH/MULTI).

        A trial already stopped gets its stored decision back, so replays agree.
        """
        t = progress(self._config, report)
        if t is None or self._config.metric not in report.metrics:
            return CONTINUE
        metric = report.metrics[self._config.metric]
        async with self._redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(self._rungs_key, self._stopped_key)
                    previous = await pipe.hget(self._stopped_key, trial)
                    if previous is not None:
                        await pipe.reset()
                        return Decision(stop=True, reason=_text(previous))
                    rungs = _parse_rungs(await pipe.hgetall(self._rungs_key))
                    decision = decide(self._config, rungs, trial, t, metric)
                    if decision.milestone is None and not decision.stop:
                        await pipe.reset()
                        return decision
                    pipe.multi()
                    if decision.milestone is not None:
                        pipe.hset(self._rungs_key, f"{decision.milestone}|{trial}", json.dumps(decision.value))
                    if decision.stop:
                        pipe.hset(self._stopped_key, trial, decision.reason)
                    await pipe.execute()
                    return decision
                except WatchError:
                    continue


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _parse_rungs(raw: Mapping[bytes | str, bytes | str]) -> dict[int, dict[str, float]]:
    rungs: dict[int, dict[str, float]] = {}
    for field, value in raw.items():
        milestone, _, trial = _text(field).partition("|")
        rungs.setdefault(int(milestone), {})[trial] = float(json.loads(_text(value)))
    return rungs
