"""ExperimentStore: experiments, their plans and trial bookkeeping in Redis.

An experiment is a hash (keys.experiment): `proto` is the Experiment as created (template,
space, policy, name, create_time, total_trials); the fields that change live next to it so
that no write ever rewrites the proto: state, reason, end_ms, next (trial indexes handed out
so far: the counter only grows), total, max (max_concurrent_trials), member (its list-index
entry). Around it: the plan (hash index -> the trial's parameters as JSON, written once), the trials
hash (index -> job id, once the job exists), the active set (indexes handed out and not yet
seen terminal: what max_concurrent_trials counts), the best-values hash (index -> best
sign * metric), the best-checkpoints hash (index -> the trial's best checkpoint, kept as
checkpoints are reported, so reading an experiment never replays a trial's events) and the
trial-owner hash (trial job id -> "experiment_id/index").

Every check-then-write is a Lua script (lua/*_experiment.lua, claim_trial.lua,
better_value.lua); the rest are plain commands.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import cast

import redis.asyncio as aioredis

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import experiment_pb2
from paddleray.services.common import paging
from paddleray.services.scheduler import keys
from paddleray.services.scheduler.search import TrialParameters

E = experiment_pb2.ExperimentState
_SCAN_CHUNK = 200


def _script(name: str) -> str:
    return resources.files("paddleray.services.scheduler").joinpath("lua", name).read_text()


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value


@dataclass
class ExperimentRecord:
    """An experiment as read: the stored proto with its changing fields filled in."""

    experiment: experiment_pb2.Experiment
    next_index: int
    total: int
    max_concurrent: int

    @property
    def experiment_id(self) -> str:
        return self.experiment.name.removeprefix("experiments/")

    @property
    def state(self) -> int:
        return self.experiment.state


_FIELDS = ("proto", "state", "reason", "end_ms", "next", "total", "max")


class ExperimentStore:
    def __init__(self, client: aioredis.Redis, request_ttl_s: int = 24 * 3600) -> None:
        self.redis = client
        self.request_ttl_s = request_ttl_s
        self._create = client.register_script(_script("create_experiment.lua"))
        self._claim = client.register_script(_script("claim_trial.lua"))
        self._end = client.register_script(_script("end_experiment.lua"))
        self._better = client.register_script(_script("better_value.lua"))
        self._better_checkpoint = client.register_script(_script("better_checkpoint.lua"))

    async def create(
        self, experiment: experiment_pb2.Experiment, plan: list[TrialParameters], request_id: str,
        fingerprint: str = "",
    ) -> tuple[str, str, str]:
        """Writes a RUNNING experiment and its plan (with a request_id, the request's fingerprint
        beside it). Returns ("created", id, ""), ("duplicate", id first created with request_id,
        the fingerprint of the request that created it) or ("exists", id, "")."""
        experiment_id = experiment.name.removeprefix("experiments/")
        member = f"{experiment.create_time.ToMilliseconds():015d}:{experiment_id}"
        result = await self._create(
            keys=[keys.experiment_request(request_id), keys.experiment(experiment_id),
                  keys.experiment_plan(experiment_id), keys.experiments_by_time(),
                  keys.experiment_state_set(E.EXPERIMENT_STATE_RUNNING)],
            args=[experiment_id, experiment.SerializeToString(), member, len(plan),
                  experiment.max_concurrent_trials, "1" if request_id else "0", self.request_ttl_s,
                  keys.experiment_prefix(), E.EXPERIMENT_STATE_RUNNING, fingerprint,
                  *(json.dumps(p) for p in plan)],
        )
        status = _text(result[0])
        if status == "duplicate":
            return status, _text(result[1]), _text(result[2])
        return status, experiment_id, ""

    async def get(self, experiment_id: str) -> ExperimentRecord | None:
        values = await self.redis.hmget(keys.experiment(experiment_id), _FIELDS)
        proto, state, reason, end_ms, nxt, total, max_concurrent = values
        if proto is None:
            return None
        experiment = experiment_pb2.Experiment.FromString(proto)
        experiment.state = cast(experiment_pb2.ExperimentState, int(state))
        experiment.state_reason = _text(reason)
        if int(end_ms or 0):
            experiment.end_time.FromMilliseconds(int(end_ms))
        return ExperimentRecord(experiment, int(nxt), int(total), int(max_concurrent))

    async def plan_entry(self, experiment_id: str, index: int) -> TrialParameters:
        return json.loads(await self.redis.hget(keys.experiment_plan(experiment_id), str(index)))

    async def claim_trial(self, experiment_id: str, job_id_prefix: str) -> int:
        """The next trial index if the experiment runs and has a free slot, else -1."""
        return int(await self._claim(
            keys=[keys.experiment(experiment_id), keys.experiment_active(experiment_id), keys.trial_owner()],
            args=[E.EXPERIMENT_STATE_RUNNING, experiment_id, job_id_prefix],
        ))

    async def record_trial(self, experiment_id: str, index: int, job_id: str) -> None:
        await self.redis.hset(keys.experiment_trials(experiment_id), str(index), job_id)

    async def trials(self, experiment_id: str) -> dict[int, str]:
        raw = await self.redis.hgetall(keys.experiment_trials(experiment_id))
        return {int(_text(k)): _text(v) for k, v in raw.items()}

    async def active(self, experiment_id: str) -> set[int]:
        return {int(_text(m)) for m in await self.redis.smembers(keys.experiment_active(experiment_id))}

    async def release_trial(self, experiment_id: str, index: int) -> bool:
        """Frees the trial's concurrency slot; True the first time only."""
        return bool(await self.redis.srem(keys.experiment_active(experiment_id), str(index)))

    async def disown_trial(self, experiment_id: str, index: int, job_id: str) -> None:
        """Gives back an index whose job id turned out to belong to a job outside the sweep."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.srem(keys.experiment_active(experiment_id), str(index))
            pipe.hdel(keys.trial_owner(), job_id)
            await pipe.execute()

    async def asha_stopped(self, experiment_id: str) -> dict[str, str]:
        raw = await self.redis.hgetall(keys.asha_stopped(experiment_id))
        return {_text(k): _text(v) for k, v in raw.items()}

    async def owner_of(self, job_id: str) -> tuple[str, int] | None:
        owner = await self.redis.hget(keys.trial_owner(), job_id)
        if owner is None:
            return None
        experiment_id, _, index = _text(owner).rpartition("/")
        return experiment_id, int(index)

    async def offer_value(self, experiment_id: str, index: int, value: float) -> None:
        await self._better(keys=[keys.experiment_best(experiment_id)], args=[index, repr(value)])

    async def offer_checkpoint(self, experiment_id: str, index: int, value: float,
                               checkpoint: common_pb2.Checkpoint) -> None:
        await self._better_checkpoint(keys=[keys.experiment_best_checkpoints(experiment_id)],
                                      args=[index, repr(value), checkpoint.SerializeToString()])

    async def best_checkpoint(self, experiment_id: str, index: int) -> common_pb2.Checkpoint | None:
        raw = await self.redis.hget(keys.experiment_best_checkpoints(experiment_id), str(index))
        return common_pb2.Checkpoint.FromString(raw) if raw is not None else None

    async def best_values(self, experiment_id: str) -> dict[int, float]:
        raw = await self.redis.hgetall(keys.experiment_best(experiment_id))
        return {int(_text(k)): float(_text(v)) for k, v in raw.items()}

    async def end(self, experiment_id: str, how: str, end_ms: int, reason: str = "") -> tuple[str, int]:
        """how is "finish" or "cancel". Returns ("ended", new state), ("not_done", 0),
        ("not_running", state) or ("missing", 0)."""
        states = (E.EXPERIMENT_STATE_RUNNING, E.EXPERIMENT_STATE_SUCCEEDED, E.EXPERIMENT_STATE_FAILED,
                  E.EXPERIMENT_STATE_CANCELLED)
        result = await self._end(
            keys=[keys.experiment(experiment_id), keys.experiment_active(experiment_id),
                  keys.experiment_best(experiment_id), *(keys.experiment_state_set(s) for s in states)],
            args=[how, end_ms, reason, *states],
        )
        status = _text(result[0])
        return status, int(result[1]) if len(result) > 1 else 0

    async def ids_in_state(self, state: int) -> list[str]:
        return sorted(_text(m) for m in await self.redis.smembers(keys.experiment_state_set(state)))

    async def delete(self, record: ExperimentRecord, trial_job_ids: list[str]) -> None:
        """Removes every key of a finished experiment (its trial jobs are deleted by the caller)."""
        experiment_id = record.experiment_id
        member = f"{record.experiment.create_time.ToMilliseconds():015d}:{experiment_id}"
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(
                keys.experiment(experiment_id), keys.experiment_plan(experiment_id),
                keys.experiment_trials(experiment_id), keys.experiment_active(experiment_id),
                keys.experiment_best(experiment_id), keys.experiment_best_checkpoints(experiment_id),
                keys.asha_rungs(experiment_id), keys.asha_stopped(experiment_id),
            )
            pipe.zrem(keys.experiments_by_time(), member)
            pipe.srem(keys.experiment_state_set(record.state), experiment_id)
            if trial_job_ids:
                pipe.hdel(keys.trial_owner(), *trial_job_ids)
            await pipe.execute()

    async def list(self, page_size: int, after: str | None, states: set[int]) -> tuple[list[ExperimentRecord], str]:
        """Newest first, starting after the index entry `after`; returns the page and the entry
        of its last experiment when more may follow ("" otherwise), so experiments created
        meanwhile (always newer) never shift a later page. A page ends early at
        paging.MAX_PAGE_BYTES (experiments carry their trial template's config)."""
        start = f"({after}" if after is not None else "+"
        page: list[ExperimentRecord] = []
        budget = paging.ByteBudget()
        previous: bytes | str = b""
        while True:
            members = await self.redis.zrange(
                keys.experiments_by_time(), start, "-", desc=True, bylex=True, offset=0, num=_SCAN_CHUNK
            )
            for member in members:
                record = await self.get(_text(member).split(":", 1)[1])
                if record is None or (states and record.state not in states):
                    continue
                if not budget.take(record.experiment.ByteSize()):
                    return page, _text(previous)  # full by bytes: the next page starts here
                page.append(record)
                previous = member
                if len(page) == page_size:
                    return page, _text(member)
            if len(members) < _SCAN_CHUNK:
                return page, ""
            start = f"({_text(members[-1])}"

