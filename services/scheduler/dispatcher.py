"""Dispatcher: claims queued jobs that fit, fairly across tenants, and keeps their leases.

One pass: move RETRYING jobs whose backoff ended back into the queue, read the queue's head
(dispatch_window jobs in effective-priority order), ask the trainer for the cluster's
resources, and claim jobs in order of their tenant's running jobs (fewest first), then queue
order. Before a claim, the job's workers must fit the nodes' free resources under its placement
strategy (node_fit.py: a rank needing 2 CPUs does not go to two nodes with 1 free each; the
job says why), counting what this replica sent that Ray has not placed yet. A claim
(lua/claim_job.lua) admits a job only when everything STARTING/RUNNING jobs
already hold plus all of its workers fit the cluster, counted in exact milli-units, and its
tenant is under its limits; it reserves, leases and marks the job STARTING in one step, so
two replicas never dispatch one job. A job that does not fit stays queued while smaller
ones behind it may start (backfill). A job that could not fit even the empty cluster is
parked: moved out of the queue into a set of its own (keys.parked), with the reason on the job
("needs 64 CPUs; the cluster has 2"), so that any number of them never hold others back nor
cost a pass its reads. Parked jobs are checked again whenever the cluster's shape (its totals,
its largest node) changes, and every `parked_recheck_s`: those that fit go back into the queue
at their old position.

Each claimed job gets a RunFollower task. Leases are renewed every lease_ttl/3; leases that
expired (a crashed replica) are taken over and their jobs followed from where they were.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from grpc import aio
from redis.exceptions import RedisError

from paddleray.scheduler.v1 import job_pb2
from paddleray.services.common.cancellation import raise_if_cancelled
from paddleray.services.common.resources import Amounts, from_cluster, milli
from paddleray.services.scheduler import metrics
from paddleray.services.scheduler.attempt_ending import deadline_s
from paddleray.services.scheduler.follower import RunFollower
from paddleray.services.scheduler.job_states import IllegalTransition
from paddleray.services.scheduler.jobs import JobManager
from paddleray.services.scheduler.node_fit import Demand, NodeView, never_fits, node_view, slot
from paddleray.services.scheduler.settings import SchedulerSettings
from paddleray.services.scheduler.store import Claim, JobRecord
from paddleray.services.scheduler.trainer_client import TrainerClient
from paddleray.trainer.v1 import trainer_service_pb2 as ts

log = logging.getLogger(__name__)
J = job_pb2.JobState
_STATS_EVERY_S = 5.0
_STOP_WAIT_S = 5.0
# How far past the window a pass looks for jobs that can run, in windows: bounds one pass's
# reads and writes while it parks the jobs the cluster can never hold (the next pass goes on at
# once, so a queue of any depth is parked in passes of this size).
_SCAN_WINDOWS = 16
_PARKED_CHUNK = 256
# With an empty queue, how often parked jobs are checked against the cluster (shape changes
# show within this; a pass with queued jobs reads the cluster anyway and checks at once).
_IDLE_PARKED_CHECK_S = 5.0


class Dispatcher:
    def __init__(self, manager: JobManager, trainer: TrainerClient, settings: SchedulerSettings,
                 wake: asyncio.Event) -> None:
        """wake: set when a job is queued (the one given to the JobManager as `queued`)."""
        self.manager = manager
        self.store = manager.store
        self.trainer = trainer
        self.settings = settings
        self.owner = settings.replica_id
        self.lease_ms = int(settings.lease_ttl_s * 1000)
        self.follower = RunFollower(manager, trainer, settings, placed=self._placed)
        # Claimed jobs whose workers Ray has not placed yet: the trainer's per-node view does not
        # show what they will take, so every pass books them first (node_fit.NodeView).
        self._placing: dict[str, Demand] = {}
        self.following: dict[str, asyncio.Task] = {}
        self._tasks: list[asyncio.Task] = []
        self._wake = wake
        # The cluster's shape when parked jobs were last checked (None: not since start-up).
        self._parked_for: tuple[int, ...] | None = None
        self._parked_checked = self._idle_look = 0.0
        # A pass stopped at its scan bound while parking: the next one starts at once.
        self._more = False

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._dispatch_loop(), name="dispatch"),
                       asyncio.create_task(self._lease_loop(), name="leases")]

    async def stop(self) -> None:
        """Stops dispatching and following, and expires this replica's leases so that another
        replica (or this one restarted) takes the jobs over at once; the runs go on."""
        tasks = [*self._tasks, *self.following.values()]
        followed = list(self.following)
        for task in tasks:
            task.cancel()
        if tasks:
            _, stuck = await asyncio.wait(tasks, timeout=_STOP_WAIT_S)
            for task in stuck:
                log.warning("task %s did not stop within %.0fs; leaving it", task.get_name(), _STOP_WAIT_S)
        self.following.clear()
        with contextlib.suppress(RedisError, OSError):
            await self.store.expire_leases(self.owner, followed)

    # -- dispatch -----------------------------------------------------------------------------

    async def _dispatch_loop(self) -> None:
        last_stats = 0.0
        while True:
            raise_if_cancelled()
            self._wake.clear()
            try:
                await self.store.promote_delayed()
                await self.dispatch_once()
                if time.monotonic() - last_stats > _STATS_EVERY_S:
                    await self._export_stats()
                    last_stats = time.monotonic()
            except (RedisError, OSError, aio.AioRpcError) as exc:
                log.warning("dispatch pass failed: %s", exc)
            if self._more:
                await asyncio.sleep(0)
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.dispatch_interval_s):
                    await self._wake.wait()

    async def dispatch_once(self) -> int:
        """One pass; returns how many jobs were claimed."""
        self._more = False
        cluster = None
        if not await self.store.queue_head(1):
            # Nothing to claim; parked jobs are still checked now and then (the cluster may
            # have grown), without asking the trainer on every pass.
            if time.monotonic() - self._idle_look >= _IDLE_PARKED_CHECK_S and await self.store.parked_count():
                self._idle_look = time.monotonic()
                cluster = await self.trainer.cluster_resources()
                await self._recheck_parked(cluster)
            if not await self.store.queue_head(1):
                return 0
        if cluster is None:
            cluster = await self.trainer.cluster_resources()
            await self._recheck_parked(cluster)
        reserved = await self.store.reserved()
        # Ray's `available` already excludes what running jobs hold, but not what a job just
        # claimed holds before its actors exist; `total` minus everything we reserved covers
        # that. The Lua claim checks reserved + demand against this capacity atomically.
        capacity = Amounts.minimum(from_cluster(cluster.total), from_cluster(cluster.available) + reserved)
        nodes = node_view(cluster)
        for demand in self._placing.values():
            nodes.take(demand)
        count_memory = cluster.total.memory_bytes > 0
        records = await self._window(cluster)
        usage = await self.store.tenant_jobs(sorted({r.job.tenant for r in records}))
        position = {r.job_id: i for i, r in enumerate(records)}
        blocked_tenants: set[str] = set()
        claimed = 0
        while records:
            records.sort(key=lambda r: (usage.get(r.job.tenant, 0), position[r.job_id]))
            record = records.pop(0)
            if record.job.tenant in blocked_tenants:
                continue
            status = await self._claim(record, capacity, nodes, Demand.of(record.job.spec, count_memory))
            if status == "ok":
                usage[record.job.tenant] = usage.get(record.job.tenant, 0) + 1
                claimed += 1
            elif status == "tenant_limit":
                blocked_tenants.add(record.job.tenant)
            elif status == "no_room" and _waited_s(record) >= self.settings.max_backfill_wait_s:
                # Smaller jobs could keep taking every freed CPU (backfill): let room build
                # up for this one instead.
                log.info("holding back smaller jobs: %s has waited %.0fs for room", record.job.name,
                         _waited_s(record))
                break
        return claimed

    async def _window(self, cluster: ts.GetClusterResourcesResponse) -> list[JobRecord]:
        """The first dispatch_window queued jobs that could run on this cluster, in queue order.

        A job that cannot run even on the empty cluster is parked (so any number of them never
        fill the window nor cost later passes anything) and is no starvation candidate (so it
        never holds smaller jobs back); it stays QUEUED, its state_reason saying why, until
        the cluster grows."""
        window = self.settings.dispatch_window
        fit: list[JobRecord] = []
        offset = scanned = 0
        while len(fit) < window:
            if scanned >= window * _SCAN_WINDOWS:
                self._more = True
                break
            ids = await self.store.queue_head(window, offset)
            scanned += len(ids)
            unfit: list[tuple[JobRecord, str]] = []
            for record in await self.store.get_many(ids):
                if record is None:
                    continue
                reason = never_fits(record.job.spec, cluster)
                if reason:
                    unfit.append((record, reason))
                else:
                    fit.append(record)
            parked = await self.manager.park(unfit)
            for (record, reason), done in zip(unfit, parked, strict=True):
                if done:
                    log.info("%s cannot run on this cluster, parked: %s", record.job.name, reason)
            # Parked jobs left the queue: the next read starts where the kept ones end.
            offset += len(ids) - sum(parked)
            if len(ids) < window:
                break
        return fit[:window]

    async def _recheck_parked(self, cluster: ts.GetClusterResourcesResponse) -> None:
        """Puts parked jobs that fit the cluster back into the queue, when its shape changed
        (or parked_recheck_s passed); ends those whose timeout passed meanwhile."""
        shape = _shape(cluster)
        if shape[0] <= 0:
            return  # a cluster that reports no CPUs is not known yet (never_fits judges nothing)
        due = time.monotonic() - self._parked_checked >= self.settings.parked_recheck_s
        if shape == self._parked_for and not due:
            return
        self._parked_for, self._parked_checked = shape, time.monotonic()
        offset = 0
        while ids := await self.store.parked(_PARKED_CHUNK, offset):
            fit: list[JobRecord] = []
            left = 0
            for record in await self.store.get_many(ids):
                if record is None:
                    continue
                deadline = deadline_s(record.job)
                if deadline is not None and time.time() >= deadline:
                    await self._time_out(record)
                    left += 1
                elif not never_fits(record.job.spec, cluster):
                    fit.append(record)
            back = await self.manager.unpark(fit)
            for record, done in zip(fit, back, strict=True):
                if done:
                    log.info("%s may fit the cluster now: back in the queue", record.job.name)
            offset += len(ids) - left - sum(back)
            if len(ids) < _PARKED_CHUNK:
                break

    async def _claim(self, record: JobRecord, capacity: Amounts, nodes: NodeView, demand: Demand) -> str:
        job = record.job
        if not nodes.fits(demand):
            await self.manager.explain_waiting(record, nodes.why_not(demand))
            return "no_room"
        deadline = deadline_s(job)
        if deadline is not None and time.time() >= deadline:
            # A retry whose backoff outlasted the job's timeout.
            await self._time_out(record)
            return "timed_out"
        limits = self.settings.limits_for(job.tenant)
        result = await self.manager.claim(
            record, self.owner, self.lease_ms,
            Claim(capacity, limits.max_jobs, milli(limits.max_gpus) if limits.max_gpus >= 0 else -1),
        )
        if result.ok:
            nodes.take(demand)
            self._placing[record.job_id] = demand
            metrics.TIME_IN_QUEUE.observe(_waited_s(record))
            log.info("claimed %s (attempt %d)", job.name, len(job.attempts) + 1)
            self._follow(record.job_id)
        return result.status

    async def _time_out(self, record: JobRecord) -> None:
        with contextlib.suppress(IllegalTransition):
            await self.manager.transition(record.job_id, J.JOB_STATE_TIMED_OUT,
                                          f"ran past its timeout of {record.job.timeout.ToJsonString()}")
            metrics.TIMEOUTS.inc()

    # -- following and leases -------------------------------------------------------------

    def _follow(self, job_id: str) -> None:
        if job_id in self.following:
            return
        task = asyncio.create_task(self.follower.follow(job_id), name=f"follow-{job_id}")
        self.following[job_id] = task
        task.add_done_callback(lambda _t: self._followed(job_id, task))

    def _followed(self, job_id: str, task: asyncio.Task) -> None:
        if self.following.get(job_id) is task:
            del self.following[job_id]
        self._placed(job_id)
        self._wake.set()  # a job ending frees room for queued ones

    def _placed(self, job_id: str) -> None:
        """The job's run got its placement (or it is no longer followed here): the trainer's
        per-node view shows what it holds from now on."""
        self._placing.pop(job_id, None)

    async def _lease_loop(self) -> None:
        every = self.settings.lease_ttl_s / 3
        while True:
            raise_if_cancelled()
            try:
                lost = await self.store.renew_leases(self.owner, list(self.following), self.lease_ms)
                for job_id in lost:
                    task = self.following.get(job_id)
                    if task is not None and not task.done():
                        # Another replica took it over after our lease lapsed: stop acting.
                        # An ended job (owner cleared) is left to its follower to finish.
                        record = await self.store.get(job_id)
                        if record is None or record.owner not in ("", self.owner):
                            task.cancel()
                for job_id in await self.store.expired_leases():
                    if await self.store.take_lease(job_id, self.owner, self.lease_ms):
                        log.info("took over %s from a replica whose lease expired", job_id)
                        metrics.TAKEOVERS.inc()
                        self._follow(job_id)
            except (RedisError, OSError) as exc:
                log.warning("lease pass failed: %s", exc)
            await asyncio.sleep(every)

    async def _export_stats(self) -> None:
        counts = await self.store.count_by_state()
        for state, count in counts.items():
            if state != J.JOB_STATE_UNSPECIFIED:
                metrics.JOBS_BY_STATE.labels(state=J.Name(state).removeprefix("JOB_STATE_")).set(count)
        metrics.QUEUE_DEPTH.set(await self.store.queue_depth())
        metrics.PARKED.set(await self.store.parked_count())


def _shape(cluster: ts.GetClusterResourcesResponse) -> tuple:
    """What decides whether a job can ever fit (node_fit.never_fits): the totals and each node's
    total, custom resources included (a node with the 'tpu' a parked job asks for joined)."""
    total = from_cluster(cluster.total)
    nodes = sorted(tuple(sorted(slot(node.total).items())) for node in cluster.nodes)
    return (total.cpu_m, total.gpu_m, total.mem, tuple(sorted(slot(cluster.total).items())), tuple(nodes))


def _waited_s(record: JobRecord) -> float:
    """Time since the job was queued (or its retry's backoff began)."""
    return max(0.0, time.time() - record.job.update_time.ToNanoseconds() / 1e9)

