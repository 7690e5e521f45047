"""JobStore: jobs, their indexes, queue, leases and events in Redis.

A job is a hash (keys.job): `proto` is the serialized Job; next to it are the fields Lua
scripts must read without parsing protobuf: version (bumped by every write, the basis of
compare-and-set), state, seq (last event sequence), id, member (its time-index entry),
score (queue position), tenant, experiment, cpu_m/gpu_m/mem (what the whole job reserves while
it runs), owner (replica holding its dispatch lease), run_seq (last trainer run event
persisted), stop_intent/stop_reason (why a stop was asked: cancel, early_stop, timeout).

Every check-then-write is one Lua script (lua/*.lua, KEYS/ARGV documented at their top); all
other reads are plain commands. The store knows nothing of which transitions are legal:
job_transitions.py decides, then writes through `update` with the version it read.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import redis.asyncio as aioredis

from paddleray.scheduler.v1 import job_pb2
from paddleray.services.common import paging, states
from paddleray.services.common.resources import Amounts, job_demand
from paddleray.services.scheduler import keys
from paddleray.services.scheduler.event_feed import EventFeed
from paddleray.services.scheduler.script_batch import ScriptBatcher

J = job_pb2.JobState
_SCAN_CHUNK = 200


def _script(name: str) -> str:
    return resources.files("paddleray.services.scheduler").joinpath("lua", name).read_text()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class JobRecord:
    """A job as read, with the version a compare-and-set write must name."""

    job: job_pb2.Job
    version: int
    owner: str
    run_seq: int
    seq: int
    stop_intent: str
    stop_reason: str

    @property
    def job_id(self) -> str:
        return self.job.name.removeprefix("jobs/")


@dataclass
class WriteResult:
    status: str  # "ok", "conflict", "lost", "missing", "no_room", "tenant_limit", ...
    version: int = 0
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class Claim:
    """Limits a claim is checked against: cluster capacity and the tenant's limits."""

    capacity: Amounts
    tenant_max_jobs: int = -1
    tenant_max_gpu_m: int = -1


_RECORD_FIELDS = ("proto", "version", "owner", "run_seq", "seq", "stop_intent", "stop_reason")


class JobStore:
    def __init__(self, client: aioredis.Redis, events_cap: int = 10_000, request_ttl_s: int = 24 * 3600) -> None:
        self.redis = client
        self.events_cap = events_cap
        self.request_ttl_s = request_ttl_s
        # Waiting readers of events share one blocking read (event_feed.py: not a connection each).
        self.feed = EventFeed(client)
        self._create = client.register_script(_script("create_job.lua"))
        self._create_batch = ScriptBatcher(client, self._create)
        self._update = client.register_script(_script("update_job.lua"))
        self._claim = client.register_script(_script("claim_job.lua"))
        self._renew = client.register_script(_script("renew_leases.lua"))
        self._take = client.register_script(_script("take_lease.lua"))
        self._promote = client.register_script(_script("promote_delayed.lua"))
        self._delete = client.register_script(_script("delete_job.lua"))
        self._move_waiting = client.register_script(_script("move_waiting.lua"))

    # -- create / read -------------------------------------------------------------------

    async def create(
        self, job: job_pb2.Job, first_event: job_pb2.JobEvent, score: float, request_id: str, fingerprint: str = ""
    ) -> tuple[str, job_pb2.Job | None, str]:
        """Writes a QUEUED job (name and create_time set) in one round trip; with a request_id,
        the request's fingerprint (common/idempotency.py) is kept with the job.

        Returns ("created", None, ""), ("duplicate", the job first created with request_id, the
        fingerprint of the request that created it), or ("exists", None, "") when the job id
        is taken.
        """
        job_id = job.name.removeprefix("jobs/")
        demand = job_demand(job.spec)
        member = f"{job.create_time.ToMilliseconds():015d}:{job_id}"
        result = await self._create_batch(
            keys=[keys.request(request_id), keys.job(job_id), keys.events(job_id), keys.by_time(),
                  keys.by_tenant(job.tenant), keys.by_experiment(job.experiment), keys.state_set(job.state),
                  keys.queue()],
            args=[job_id, job.SerializeToString(), member, repr(score), job.tenant, job.experiment,
                  demand.cpu_m, demand.gpu_m, demand.mem, first_event.SerializeToString(), self.events_cap,
                  self.request_ttl_s, "1" if request_id else "0", keys.job_prefix(), job.state, fingerprint],
        )
        status = result[0].decode()
        if status == "duplicate":
            return status, job_pb2.Job.FromString(result[1]), result[2].decode()
        return status, None, ""

    async def get(self, job_id: str) -> JobRecord | None:
        values = await self.redis.hmget(keys.job(job_id), _RECORD_FIELDS)
        return _record(values)

    async def get_many(self, job_ids: list[str]) -> list[JobRecord | None]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                pipe.hmget(keys.job(job_id), _RECORD_FIELDS)
            return [_record(values) for values in await pipe.execute()]

    # -- compare-and-set writes ---------------------------------------------------------

    async def update(
        self,
        record: JobRecord,
        job: job_pb2.Job,
        events: Sequence[job_pb2.JobEvent] = (),
        *,
        owner: str = "",
        dequeue: bool = False,
        delay_until_ms: int | None = None,
        release: bool = False,
        fields: dict[str, str | int] | None = None,
    ) -> WriteResult:
        """Writes `job` if the record is still at record.version (and held by owner, if given)."""
        job_id = record.job_id
        ops: list[str | int | bytes] = []
        for name, value in (fields or {}).items():
            ops += ["set", f"{name}={value}"]
        if dequeue:
            ops += ["dequeue", ""]
        if delay_until_ms is not None:
            ops += ["delay", delay_until_ms]
        if release:
            ops += ["release", ""]
        result = await self._update(
            keys=[keys.job(job_id), keys.events(job_id), keys.state_set(record.job.state), keys.state_set(job.state),
                  keys.queue(), keys.delayed(), keys.leases(), keys.reserved(), keys.tenant_usage(job.tenant),
                  keys.parked()],
            args=[record.version, owner, job.SerializeToString(), job.state, self.events_cap, len(events),
                  *(e.SerializeToString() for e in events), *ops],
        )
        return _write_result(result)

    async def claim(
        self, record: JobRecord, job: job_pb2.Job, event: job_pb2.JobEvent, owner: str, lease_ms: int, limits: Claim
    ) -> WriteResult:
        job_id = record.job_id
        cap = limits.capacity
        result = await self._claim(
            keys=[keys.job(job_id), keys.events(job_id), keys.state_set(record.job.state), keys.state_set(job.state),
                  keys.queue(), keys.leases(), keys.reserved(), keys.tenant_usage(job.tenant)],
            args=[record.version, job.SerializeToString(), job.state, owner, now_ms() + lease_ms, cap.cpu_m,
                  cap.gpu_m, cap.mem, limits.tenant_max_jobs, limits.tenant_max_gpu_m, self.events_cap,
                  event.SerializeToString()],
        )
        return _write_result(result)

    async def delete(self, job_id: str) -> tuple[str, int]:
        """Returns ("deleted"|"missing", 0) or ("not_terminal", state)."""
        tenant, experiment, state = await self.redis.hmget(keys.job(job_id), ("tenant", "experiment", "state"))
        if state is None:
            return "missing", 0
        experiment = experiment.decode() if experiment else ""
        result = await self._delete(
            keys=[keys.job(job_id), keys.events(job_id), keys.by_time(), keys.by_tenant(tenant.decode()),
                  keys.by_experiment(experiment), keys.state_set(int(state))],
            args=[int(state), *sorted(states.JOB_TERMINAL)],
        )
        return result[0].decode(), int(result[1]) if len(result) > 1 else 0

    # -- listing ----------------------------------------------------------------------------

    async def list_jobs(
        self, page_size: int, after: str | None, states: set[int], labels: dict[str, str], experiment: str,
        tenant: str, max_bytes: int = paging.MAX_PAGE_BYTES, without_config: bool = False,
    ) -> tuple[list[job_pb2.Job], str]:
        """Newest first, starting after the index entry `after`, at most page_size jobs and (past
        the first) max_bytes of them, each without spec.config when asked; returns the page and
        the entry of its last job when more may follow ("" otherwise). Paging by index entry means jobs created meanwhile (always
        newer) never shift a later page."""
        if experiment:
            index = keys.by_experiment(experiment)
        elif tenant:
            index = keys.by_tenant(tenant)
        else:
            index = keys.by_time()
        start = f"({after}" if after is not None else "+"
        page: list[job_pb2.Job] = []
        budget = paging.ByteBudget(max_bytes)
        last = ""
        while len(page) < page_size:
            members = await self.redis.zrange(index, start, "-", desc=True, bylex=True, offset=0, num=_SCAN_CHUNK)
            if not members:
                return page, ""
            async with self.redis.pipeline(transaction=False) as pipe:
                for member in members:
                    pipe.hmget(keys.job(member.decode().split(":", 1)[1]), ("state", "proto"))
                rows = await pipe.execute()
            for member, (state, proto) in zip(members, rows, strict=True):
                if proto is None or (states and int(state) not in states):
                    continue
                job = job_pb2.Job.FromString(proto)
                if tenant and job.tenant != tenant:
                    continue
                if any(job.labels.get(k) != v for k, v in labels.items()):
                    continue
                if without_config:
                    job.spec.ClearField("config")
                if not budget.take(job.ByteSize() if without_config else len(proto)):
                    return page, last  # full by bytes: the next page starts at this job
                page.append(job)
                last = member.decode()
                if len(page) == page_size:
                    break
            if len(members) < _SCAN_CHUNK and len(page) < page_size:
                return page, ""
            start = f"({members[-1].decode()}"
        return page, last

    # -- events -------------------------------------------------------------------------------

    async def events_after(self, job_id: str, after: int, block_ms: int | None = None) -> list[job_pb2.JobEvent]:
        """Events with a sequence above `after`, waiting up to block_ms for one when given.

        A job with one event keeps it in its hash ("e1", see create_job.lua) and has no stream
        yet: read together in one transaction, so the move to the stream is never missed.
        """
        first, entries = await self._first_and_entries(job_id, f"({after}-1", 500)
        if first is not None and after < 1:
            return [_event(b"1-1", {b"e": first})]
        if entries or block_ms is None:
            return [_event(entry_id, data) for entry_id, data in entries]
        # XREAD of a stream that does not exist yet waits for its creation (the second event).
        return [_event(entry_id, data) for entry_id, data in await self.feed.wait(keys.events(job_id), after, block_ms)]

    async def first_sequence(self, job_id: str) -> int:
        """Oldest sequence still kept (0 when there is none)."""
        first, entries = await self._first_and_entries(job_id, "-", 1)
        if first is not None:
            return 1
        return int(entries[0][0].split(b"-")[0]) if entries else 0

    async def _first_and_entries(self, job_id: str, start: str, count: int) -> tuple[bytes | None, list]:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hget(keys.job(job_id), "e1")
            pipe.xrange(keys.events(job_id), start, "+", count=count)
            first, entries = await pipe.execute()
        return first, entries

    # -- dispatch support ------------------------------------------------------------------

    async def queue_head(self, count: int, offset: int = 0) -> list[str]:
        """Ids of `count` queued jobs in dispatch order, from position `offset`."""
        return [m.decode() for m in await self.redis.zrange(keys.queue(), offset, offset + count - 1)]

    async def queue_depth(self) -> int:
        return await self.redis.zcard(keys.queue())

    async def parked(self, count: int, offset: int = 0) -> list[str]:
        """Ids of `count` parked jobs (keys.parked) in queue order, from position `offset`."""
        return [m.decode() for m in await self.redis.zrange(keys.parked(), offset, offset + count - 1)]

    async def park(self, moves: Sequence[tuple[JobRecord, job_pb2.Job]]) -> list[bool]:
        """Moves queued jobs to the parked set, each written as its new proto if still at the
        version read; one round trip. Returns, per job, whether it moved."""
        return await self._move(keys.queue(), keys.parked(), moves)

    async def unpark(self, moves: Sequence[tuple[JobRecord, job_pb2.Job]]) -> list[bool]:
        """Moves parked jobs back into the queue at their old scores, as park() does."""
        return await self._move(keys.parked(), keys.queue(), moves)

    async def _move(self, source: str, target: str, moves: Sequence[tuple[JobRecord, job_pb2.Job]]) -> list[bool]:
        if not moves:
            return []
        args: list[int | bytes] = []
        for record, job in moves:
            args += [record.version, job.SerializeToString()]
        moved = await self._move_waiting(keys=[source, target, *(keys.job(r.job_id) for r, _ in moves)], args=args)
        return [bool(m) for m in moved]

    async def parked_count(self) -> int:
        return await self.redis.zcard(keys.parked())

    async def reserved(self) -> Amounts:
        cpu, gpu, mem = await self.redis.hmget(keys.reserved(), ("cpu_m", "gpu_m", "mem"))
        return Amounts(int(cpu or 0), int(gpu or 0), int(mem or 0))

    async def tenant_jobs(self, tenants: list[str]) -> dict[str, int]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for tenant in tenants:
                pipe.hget(keys.tenant_usage(tenant), "jobs")
            return {t: int(v or 0) for t, v in zip(tenants, await pipe.execute(), strict=True)}

    async def promote_delayed(self) -> int:
        return int(await self._promote(keys=[keys.delayed(), keys.queue()], args=[now_ms(), keys.job_prefix()]))

    async def renew_leases(self, owner: str, job_ids: list[str], lease_ms: int) -> list[str]:
        """Extends this owner's leases; returns the ids it no longer holds."""
        if not job_ids:
            return []
        lost = await self._renew(keys=[keys.leases(), *map(keys.job, job_ids)], args=[owner, now_ms() + lease_ms, *job_ids])
        return [x.decode() for x in lost]

    async def expire_leases(self, owner: str, job_ids: list[str]) -> None:
        """Lets other replicas take these jobs over at once (a clean shutdown)."""
        if job_ids:
            await self._renew(keys=[keys.leases(), *map(keys.job, job_ids)], args=[owner, 0, *job_ids])

    async def expired_leases(self) -> list[str]:
        return [m.decode() for m in await self.redis.zrangebyscore(keys.leases(), "-inf", now_ms())]

    async def take_lease(self, job_id: str, owner: str, lease_ms: int) -> bool:
        now = now_ms()
        return bool(await self._take(keys=[keys.leases(), keys.job(job_id)], args=[job_id, owner, now, now + lease_ms]))

    async def ids_in_states(self, job_states: list[int]) -> list[str]:
        """Ids of the jobs now in any of these states."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for state in job_states:
                pipe.smembers(keys.state_set(state))
            return sorted(m.decode() for members in await pipe.execute() for m in members)

    async def count_by_state(self) -> dict[int, int]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for state in J.values():
                pipe.scard(keys.state_set(state))
            return dict(zip(J.values(), await pipe.execute(), strict=True))



def _record(values: list[Any]) -> JobRecord | None:
    proto, version, owner, run_seq, seq, intent, reason = values
    if proto is None:
        return None
    return JobRecord(job_pb2.Job.FromString(proto), int(version), (owner or b"").decode(), int(run_seq or 0),
                     int(seq or 0), (intent or b"").decode(), (reason or b"").decode())


def _event(entry_id: bytes, data: dict[bytes, bytes]) -> job_pb2.JobEvent:
    event = job_pb2.JobEvent.FromString(data[b"e"])
    event.sequence = int(entry_id.split(b"-")[0])
    return event


def _write_result(result: list) -> WriteResult:
    status = result[0].decode()
    if status == "ok":
        return WriteResult(status, int(result[1]))
    return WriteResult(status, detail=result[1].decode() if len(result) > 1 else "")
