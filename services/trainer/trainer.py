"""Trainer: the domain behind TrainerService (runs, stops, events, logs, cluster resources).

The RPCs' operations take the caller (an argument named `caller`) and apply the tenant rules of
common.identity and references.py: a run's tenant is the caller's credential's, or (for an
admin: the scheduler's own service credential) the one asked for, the job's tenant; another
tenant's run is NOT_FOUND, as a missing one; a read-only caller may not start or stop runs.

Everything runs on the service's event loop; Ray calls that block are awaited as object
refs or pushed to a thread.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import logging
import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray

from paddleray.common.v1 import common_pb2
from paddleray.services.common import errors, idempotency, identity, names, paging, ray_private
from paddleray.services.common.identity import Identity
from paddleray.services.common.ray_connection import RayConnection, in_daemon_thread
from paddleray.services.common.storage import is_uri
from paddleray.services.trainer import references, runs
from paddleray.services.trainer.context import RunPaths
from paddleray.services.trainer.executor import RunExecutor
from paddleray.services.trainer.logs import LogLine, LogReader, next_batch
from paddleray.services.trainer.pool import WorkerPool, pending_demand
from paddleray.services.trainer.records import RunEvent, RunState
from paddleray.services.trainer.settings import TrainerSettings
from paddleray.services.trainer.spec import run_spec
from paddleray.services.trainer.worker_group import WorkerGroup

log = logging.getLogger(__name__)

# Resources Ray makes for each placement group ("CPU_group_<pg id>", "CPU_group_<i>_<pg id>",
# "bundle_group_..."): one set per run, so the view would grow with the runs; nothing asks for them.
_PLACEMENT_GROUP_RESOURCE = re.compile(r"(^bundle_group_|_group_(\d+_)?[0-9a-f]{16,}$)")


@dataclass(frozen=True)
class Resources:
    num_cpus: float = 0.0
    num_gpus: float = 0.0
    memory_bytes: int = 0
    custom: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_ray(cls, amounts: dict[str, float]) -> Resources:
        custom = {
            k: v for k, v in amounts.items()
            if k not in ("CPU", "GPU", "memory", "object_store_memory") and not k.startswith("node:")
            and not _PLACEMENT_GROUP_RESOURCE.search(k)
        }
        return cls(amounts.get("CPU", 0.0), amounts.get("GPU", 0.0), int(amounts.get("memory", 0)), custom)


@dataclass(frozen=True)
class NodeResources:
    node_id: str
    address: str
    total: Resources
    available: Resources


@dataclass(frozen=True)
class ClusterResources:
    total: Resources
    available: Resources
    nodes: list[NodeResources]


def parse_run_name(name: str) -> str:
    return names.RUN.parse_one(name)


def _repeated(earlier: runs.RunRecord, fingerprint: str) -> runs.RunRecord:
    """The run a repeated request_id started, when the request repeats the first one."""
    idempotency.check_repeat(earlier.request_fp, fingerprint)
    return earlier


class Trainer:
    def __init__(self, settings: TrainerSettings) -> None:
        self.settings = settings
        self.storage_root: Path | str = settings.storage_root if is_uri(settings.storage_root) else Path(settings.storage_root)
        self.registry = runs.RunRegistry(self._records_dir(settings), self.storage_root)
        self.pool = WorkerPool(
            max_idle_groups=settings.pool_max_idle_groups,
            idle_ttl_s=settings.pool_idle_ttl_s,
            init_timeout_s=settings.collective_init_timeout_s,
            demand_waiting=self._demand_waiting if settings.pool_yield_to_demand else None,
        )
        self._executors: dict[str, RunExecutor] = {}
        self._run_tasks: dict[str, asyncio.Task] = {}
        self._tasks: set[asyncio.Task] = set()
        self._loaded = False
        self.ray_connection = RayConnection(
            settings.ray_address,
            namespace="paddleray",
            service="trainer",
            probe_interval_s=settings.ray_probe_interval_s,
            lost_after_s=settings.ray_lost_after_s,
            retry_interval_s=settings.ray_retry_interval_s,
        )

    @staticmethod
    def _records_dir(settings: TrainerSettings) -> Path:
        """The run records' directory: the storage root's own (runs/ beside the checkpoints),
        or a local one when checkpoints and logs are on an object store."""
        if not is_uri(settings.storage_root):
            return Path(settings.storage_root)
        return settings.records_dir or Path.home() / ".paddleray" / "trainer-records"

    async def start(self) -> None:
        """Loads earlier runs, then connects to Ray; returns once the trainer can serve.

        Until then every RPC answers UNAVAILABLE (reads too: a run list without the earlier
        runs would be wrong, and a run accepted before loading would be failed by it).
        """
        self.load_runs()
        await self.ray_connection.connect()
        self._spawn(self.pool.run_reaper())
        self._spawn(self.ray_connection.watch(self._on_ray_lost))

    def load_runs(self) -> None:
        """Reads the runs an earlier trainer left (active ones end FAILED: their actors are gone)."""
        loaded = self.registry.load()
        self._loaded = True
        if loaded:
            log.info("loaded %d earlier runs from %s", loaded, self.storage_root)

    async def shutdown(self) -> None:
        """Ends active runs as STOPPED and frees every actor the trainer holds."""
        for executor in list(self._executors.values()):
            executor.request_stop(RunState.STOPPED, "the trainer is shutting down", 0)
            if executor.group is not None:
                executor.group.kill()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        # Let each run record its end before the process goes.
        await asyncio.gather(*tasks, return_exceptions=True)
        self.pool.shutdown()
        await self.ray_connection.close()

    async def ready(self) -> bool:
        """What health reports: SERVING only once earlier runs are loaded and Ray is connected."""
        return self._loaded and self.ray_connection.connected

    async def _demand_waiting(self) -> bool:
        """Whether other work waits for resources on the cluster (the pool then lets go)."""
        if not self.ray_connection.connected:
            return False
        return bool(await in_daemon_thread(lambda: pending_demand(ray.get_runtime_context().gcs_address)))

    async def _on_ray_lost(self, reason: str) -> None:
        """Fails the runs on the lost cluster without calling Ray (its GCS is gone)."""
        self.pool.forget()
        lost = [(executor, self._run_tasks.get(run_id)) for run_id, executor in self._executors.items()]
        reason = f"{reason}; the run's actors ended with it"
        for executor, task in lost:
            executor.abandon(reason)
            if task is not None:
                task.cancel()
        await asyncio.gather(*(task for _, task in lost if task is not None), return_exceptions=True)

    def _require_loaded(self) -> None:
        if not self._loaded:
            raise errors.Unavailable("the trainer is starting: earlier runs are not loaded yet")

    async def start_run(
        self,
        spec: common_pb2.TrainingSpec,
        run_id: str = "",
        request_id: str = "",
        job: str = "",
        timeout_s: float | None = None,
        resume_from: common_pb2.Checkpoint | None = None,
        labels: dict[str, str] | None = None,
        tenant: str = "",
        fingerprint: Callable[[str], str] | None = None,
        *,
        caller: Identity,
    ) -> runs.RunRecord:
        """StartRun, as caller. tenant: the one asked for ('' = caller's). fingerprint: of the
        request given the tenant it resolves to (common/idempotency.py); a repeated request_id
        must repeat it, and must be caller's tenant's."""
        identity.require_write(caller, "StartRun")
        tenant = identity.tenant_for_write(caller, tenant, "tenant")
        references.check(caller, spec, resume_from, self.storage_root)
        record = await self._start_run(spec, run_id, request_id, job, timeout_s, resume_from, labels, tenant,
                                       fingerprint(tenant) if fingerprint is not None else "")
        if record.tenant != tenant:
            # A repeated request_id returns the run first started with it: not another tenant's.
            raise idempotency.reused()
        return references.shown(caller, record)

    async def _start_run(
        self, spec: common_pb2.TrainingSpec, run_id: str, request_id: str, job: str, timeout_s: float | None,
        resume_from: common_pb2.Checkpoint | None, labels: dict[str, str] | None, tenant: str, fingerprint: str,
    ) -> runs.RunRecord:
        self._require_loaded()
        self.ray_connection.require()
        idempotency.check_request_id(request_id)
        if request_id and (earlier := self.registry.by_request_id(request_id)) is not None:
            return _repeated(earlier, fingerprint)
        if run_id:
            names.check_id(run_id, "run_id")
        else:
            run_id = f"run-{uuid.uuid4().hex[:12]}"
        resume_uri = resume_from.uri if resume_from is not None else ""
        parsed = run_spec(spec, self.settings.entrypoint_allowlist, timeout_s, resume_uri, self.storage_root)
        if spec.datasets:
            from paddleray.services.trainer.datasets import resolve_datasets

            # A bad path or format fails the request, not the run later.
            await in_daemon_thread(functools.partial(resolve_datasets, spec.datasets, self.storage_root))
            # A retry of this request may have been accepted while the files were checked.
            if request_id and (earlier := self.registry.by_request_id(request_id)) is not None:
                return _repeated(earlier, fingerprint)
        record = self.registry.add(
            runs.RunRecord(
                run_id=run_id,
                spec=spec,
                job=job,
                request_id=request_id,
                timeout_s=timeout_s,
                resume_from=resume_from if resume_uri else None,
                labels=dict(labels or {}),
                tenant=tenant,
                request_fp=fingerprint if request_id else "",
            )
        )
        executor = RunExecutor(
            run_id, parsed, self.registry, self.pool, self.storage_root,
            poll_timeout_s=self.settings.poll_timeout_s, timeout_grace_s=self.settings.stop_grace_s,
        )
        self._executors[run_id] = executor
        self._run_tasks[run_id] = self._spawn(self._execute(executor))
        return record

    def get_run(self, name: str, *, caller: Identity) -> runs.RunRecord:
        """The run as caller may see it (references.shown)."""
        return references.shown(caller, self._visible(name, caller))

    def _visible(self, name: str, caller: Identity) -> runs.RunRecord:
        """The run's (live) record, or NOT_FOUND (as for a missing run) when caller may not see its tenant."""
        self._require_loaded()
        record = self.registry.get(parse_run_name(name))
        identity.check_visible(caller, record.tenant, name)
        return record

    def list_runs(
        self, page_size: int = 0, page_token: str = "", states: Sequence[RunState] = (), job: str = "",
        tenant: str = "", *, caller: Identity,
    ) -> tuple[list[runs.RunRecord], str]:
        """A page of the runs of `tenant` ('' = all, admins only; identity.list_filter) as caller
        may see them; an empty page when a member asks for another tenant's."""
        narrowed = identity.list_filter(caller, tenant)
        if narrowed is None:
            return [], ""
        tenant = narrowed
        self._require_loaded()
        size = paging.page_size(page_size)
        filters = {"states": [s.value for s in states], "job": job, "tenant": tenant}
        records = sorted(self.registry.all(), key=lambda r: (r.create_time, r.run_id), reverse=True)
        records = [r for r in records if (not states or r.state in states) and (not job or r.job == job)
                   and (not tenant or r.tenant == tenant)]
        position = paging.decode_page_token(page_token, filters, "ListRuns")
        if position is not None:
            cursor = _cursor(position)
            records = [r for r in records if (r.create_time, r.run_id) < cursor]
        # At most size runs and (past the first) paging.MAX_PAGE_BYTES of their specs.
        budget = paging.ByteBudget()
        page = list(itertools.takewhile(lambda r: budget.take(r.spec.ByteSize()), records[:size]))
        more = len(records) > len(page)
        return [references.shown(caller, r) for r in page], paging.encode_page_token(_position(page[-1]), filters) if more else ""

    async def stop_run(self, name: str, grace_s: float | None = None, reason: str = "", *,
                       caller: Identity) -> runs.RunRecord:
        identity.require_write(caller, "StopRun")
        record = self._visible(name, caller)
        if grace_s is not None and grace_s < 0:
            raise errors.InvalidArgument("grace_period", "must be >= 0")
        executor = self._executors.get(record.run_id)
        if record.terminal or executor is None:
            return references.shown(caller, record)
        grace = self.settings.stop_grace_s if grace_s is None else grace_s
        executor.request_stop(RunState.STOPPED, reason or "stopped by StopRun", grace)
        return references.shown(caller, record)

    def watch(self, name: str, after_sequence: int = 0, *, caller: Identity) -> AsyncIterator[RunEvent]:
        run_id = self._visible(name, caller).run_id
        if after_sequence < 0:
            raise errors.InvalidArgument("after_sequence", "must be >= 0")
        return self.registry.watch(run_id, after_sequence)

    async def logs(
        self, name: str, rank: int | None = None, tail_lines: int = 0, follow: bool = False, *, caller: Identity,
    ) -> AsyncIterator[list[LogLine]]:
        record = self._visible(name, caller)  # the live record: follow reads its state as it changes
        if tail_lines < 0:
            raise errors.InvalidArgument("tail_lines", "must be >= 0")
        world = record.world_size
        if rank is not None and not 0 <= rank < world:
            raise errors.InvalidArgument("rank", f"must be between 0 and {world - 1}")
        reader = LogReader(RunPaths.of(self.storage_root, record.run_id).logs, [rank] if rank is not None else list(range(world)))
        first = reader.stream() if tail_lines == 0 else iter(await in_daemon_thread(functools.partial(reader.initial, tail_lines)))
        async for batch in _batches(first):
            yield batch
        while follow and not record.terminal:
            await asyncio.sleep(self.settings.log_follow_interval_s)
            async for batch in _batches(reader.stream()):
                yield batch
        # Workers flush their last lines as they end: one more read after the end.
        if follow:
            async for batch in _batches(reader.stream()):
                yield batch

    async def cluster_resources(self) -> ClusterResources:
        self.ray_connection.require()
        try:
            total, available, nodes, per_node = await in_daemon_thread(_ray_resources)
        except Exception as exc:  # noqa: BLE001 - any failure to reach Ray
            raise errors.Unavailable(f"Ray cannot be reached: {exc}") from exc
        # Idle warm groups hold reservations that any run may take (they are evicted for it).
        reclaimable = self.pool.idle_resources()
        available = _plus(available, reclaimable)
        idle_on = self.pool.idle_resources_by_node()
        return ClusterResources(
            total=Resources.from_ray(total),
            available=Resources.from_ray(available),
            nodes=[
                NodeResources(
                    node_id=node["NodeID"],
                    address=node.get("NodeManagerAddress", ""),
                    total=Resources.from_ray(node.get("Resources", {})),
                    available=Resources.from_ray(_plus(per_node.get(node["NodeID"], {}), idle_on.get(node["NodeID"], {}))),
                )
                for node in nodes
                if node.get("Alive")
            ],
        )

    def active_group(self, name: str) -> WorkerGroup | None:
        """The worker group a run is on right now (for operators and tests)."""
        executor = self._executors.get(parse_run_name(name))
        return executor.group if executor is not None else None

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _execute(self, executor: RunExecutor) -> None:
        try:
            await executor.run()
        finally:
            self._executors.pop(executor.run_id, None)
            self._run_tasks.pop(executor.run_id, None)


async def _batches(lines: Iterator[LogLine]) -> AsyncIterator[list[LogLine]]:
    """Lines in messages of about 1 MiB, each read in a thread: a run's logs may be large,
    and the event loop serves every call."""
    while batch := await in_daemon_thread(functools.partial(next_batch, lines)):
        yield batch


def _plus(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: a.get(k, 0.0) + b.get(k, 0.0) for k in {*a, *b}}


def _ray_resources() -> tuple[dict, dict, list[dict[str, Any]], dict[str, dict]]:
    return (ray.cluster_resources(), ray.available_resources(), ray.nodes(),
            ray_private.available_resources_per_node())


def _position(record: runs.RunRecord) -> str:
    """ListRuns pages by (create_time, run_id), newest first: the last run of a page."""
    return json.dumps([record.create_time, record.run_id])


def _cursor(position: str) -> tuple[float, str]:
    try:
        created, run_id = json.loads(position)
        return float(created), str(run_id)
    except (ValueError, TypeError):
        raise errors.InvalidArgument("page_token", "not a token returned by ListRuns") from None
