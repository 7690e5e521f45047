"""Dispatcher: claims queued jobs that fit, fairly across tenants, and keeps their leases.

One pass: move RETRYING jobs whose backoff ended back into the queue, read the queue's head
(dispatch_window jobs in effective-priority order), ask the trainer for the cluster's
resources, and claim jobs in order of their tenant's running jobs (fewest first), then queue
order. A claim (lua/claim_job.lua) admits a job only when everything STARTING/RUNNING jobs
already hold plus all of its workers fit the cluster, counted in exact milli-units, and its
tenant is under its limits; it reserves, leases and marks the job STARTING in one step, so
two replicas never dispatch one job. A job that does not fit stays queued while smaller
ones behind it may start (backfill). A job that could not fit even the empty cluster is
passed over, with the reason on the job ("needs 64 CPUs; the cluster has 2"), and never holds
others back.

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
from paddleray.services.scheduler import metrics
from paddleray.services.scheduler.follower import RunFollower, deadline_s
from paddleray.services.scheduler.jobs import IllegalTransition, JobManager
from paddleray.services.scheduler.resources import Amounts, from_cluster, milli, never_fits
from paddleray.services.scheduler.settings import SchedulerSettings
from paddleray.services.scheduler.store import Claim, JobRecord
from paddleray.services.scheduler.trainer_client import TrainerClient
from paddleray.trainer.v1 import trainer_service_pb2 as ts

log = logging.getLogger(__name__)
J = job_pb2.JobState
_STATS_EVERY_S = 5.0
_STOP_WAIT_S = 5.0
# How far past the window a pass looks for jobs that can run, in windows (bounds a pass's reads
# when the queue's head is all jobs the cluster can never hold).
_SCAN_WINDOWS = 16


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
        self.follower = RunFollower(manager, trainer, settings)
        self.following: dict[str, asyncio.Task] = {}
        self._tasks: list[asyncio.Task] = []
        self._wake = wake

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
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.dispatch_interval_s):
                    await self._wake.wait()

    async def dispatch_once(self) -> int:
        """One pass; returns how many jobs were claimed."""
        if not await self.store.queue_head(1):
            return 0
        cluster = await self.trainer.cluster_resources()
        reserved = await self.store.reserved()
        # Ray's `available` already excludes what running jobs hold, but not what a job just
        # claimed holds before its actors exist; `total` minus everything we reserved covers
        # that. The Lua claim checks reserved + demand against this capacity atomically.
        capacity = Amounts.minimum(from_cluster(cluster.total), from_cluster(cluster.available) + reserved)
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
            status = await self._claim(record, capacity)
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

        A job that cannot run even on the empty cluster is passed over (so any number of them
        never fill the window) and is no starvation candidate (so it never holds smaller jobs
        back); it stays queued, its state_reason saying why, until the cluster grows."""
        window = self.settings.dispatch_window
        fit: list[JobRecord] = []
        offset = 0
        while len(fit) < window and offset < window * _SCAN_WINDOWS:
            ids = await self.store.queue_head(window, offset)
            offset += len(ids)
            for record in await self.store.get_many(ids):
                if record is None:
                    continue
                reason = never_fits(record.job.spec, cluster)
                if not reason:
                    fit.append(record)
                elif await self.manager.explain_waiting(record, reason):
                    log.info("%s cannot run on this cluster: %s", record.job.name, reason)
            if len(ids) < window:
                break
        return fit[:window]

    async def _claim(self, record: JobRecord, capacity: Amounts) -> str:
        job = record.job
        deadline = deadline_s(job)
        if deadline is not None and time.time() >= deadline:
            # A retry whose backoff outlasted the job's timeout.
            with contextlib.suppress(IllegalTransition):
                await self.manager.transition(record.job_id, J.JOB_STATE_TIMED_OUT,
                                              f"ran past its timeout of {job.timeout.ToJsonString()}")
                metrics.TIMEOUTS.inc()
            return "timed_out"
        limits = self.settings.limits_for(job.tenant)
        result = await self.manager.claim(
            record, self.owner, self.lease_ms,
            Claim(capacity, limits.max_jobs, milli(limits.max_gpus) if limits.max_gpus >= 0 else -1),
        )
        if result.ok:
            metrics.TIME_IN_QUEUE.observe(_waited_s(record))
            log.info("claimed %s (attempt %d)", job.name, len(job.attempts) + 1)
            self._follow(record.job_id)
        return result.status

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
        self._wake.set()  # a job ending frees room for queued ones

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


def _waited_s(record: JobRecord) -> float:
    """Time since the job was queued (or its retry's backoff began)."""
    return max(0.0, time.time() - record.job.update_time.ToNanoseconds() / 1e9)

