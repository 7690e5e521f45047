"""A bounded warm pool of worker groups with Paddle imported and their collective joined.

Whole groups are kept, keyed by GroupSpec (world size, resources, runtime env with its
package digest, placement):
a process can join only one Paddle collective group, so a rank cannot move to another
group, but the same ranks can run the next run of the same shape at once. An idle group
still holds its placement group, so when a run of another shape cannot be placed, idle
groups are evicted (oldest first) to make room; idle groups are also released after a TTL,
and at once (oldest first, one per check) while anything else on the cluster waits for
resources: an export task, a Serve replica or another driver's actors are pending in Ray's
resource demands, which the pool would otherwise starve until the TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from paddleray.services.trainer import metrics
from paddleray.services.trainer.backend import PaddleBackendConfig
from paddleray.services.trainer.spec import GroupSpec
from paddleray.services.trainer.worker_group import WorkerGroup, bundle

log = logging.getLogger(__name__)


@dataclass
class _Idle:
    group: WorkerGroup
    since: float


class WorkerPool:
    def __init__(
        self,
        max_idle_groups: int = 4,
        idle_ttl_s: float = 300.0,
        evict_after_s: float = 0.5,
        init_timeout_s: float = 120.0,
        demand_check_s: float = 1.0,
        demand_waiting: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        self.max_idle_groups = max_idle_groups
        self.idle_ttl_s = idle_ttl_s
        # How long a new placement group may wait before idle groups make room for it.
        self.evict_after_s = evict_after_s
        self.init_timeout_s = init_timeout_s
        # Whether the cluster has resource demands it cannot meet now (pending_demand below).
        self.demand_check_s = demand_check_s
        self.demand_waiting = demand_waiting
        self._idle: list[_Idle] = []

    async def acquire(self, spec: GroupSpec, on_placed: Callable[[], None] | None = None) -> tuple[WorkerGroup, bool]:
        """A started group for `spec` and whether it was warm. Cancelling frees what it took."""
        while (warm := self._take_idle(spec)) is not None:
            try:
                responds = await self._responds(warm)
            except BaseException:  # cancelled: the group is neither idle nor handed out
                warm.kill()
                raise
            if responds:
                metrics.POOL_REQUESTS.labels(result="hit").inc()
                return warm, True
            warm.kill()
        metrics.POOL_REQUESTS.labels(result="miss").inc()
        group = await WorkerGroup.reserve(spec)
        try:
            await self._wait_placed(group)
            if on_placed is not None:
                on_placed()
            config = PaddleBackendConfig(use_gpu=spec.resources.num_gpus > 0, init_timeout_s=self.init_timeout_s)
            await group.start(config)
        except BaseException:
            group.kill()
            raise
        return group, False

    def release(self, group: WorkerGroup, reusable: bool) -> None:
        """Keeps a healthy group warm (if there is room), kills it otherwise.

        A warm worker keeps the modules it imported, so a group is kept only when the same key
        means the same code: groups with a plain working_dir are not kept (the directory may
        change between runs); a package is content-addressed, so its URI in the key makes a
        group serve only runs of that exact package.
        """
        if reusable and group.alive and group.spec.env.immutable and self.max_idle_groups > 0:
            self._idle.append(_Idle(group, time.monotonic()))
            while len(self._idle) > self.max_idle_groups:
                self._idle.pop(0).group.kill()
        else:
            group.kill()
        metrics.POOL_IDLE_GROUPS.set(len(self._idle))

    def evict_oldest(self) -> bool:
        if not self._idle:
            return False
        self._idle.pop(0).group.kill()
        metrics.POOL_IDLE_GROUPS.set(len(self._idle))
        return True

    def reap(self, now: float | None = None) -> int:
        """Kills groups idle for longer than the TTL; returns how many."""
        now = time.monotonic() if now is None else now
        expired = [idle for idle in self._idle if now - idle.since > self.idle_ttl_s]
        for idle in expired:
            self._idle.remove(idle)
            idle.group.kill()
        metrics.POOL_IDLE_GROUPS.set(len(self._idle))
        return len(expired)

    async def run_reaper(self) -> None:
        reap_every = max(self.idle_ttl_s / 4, 0.5)
        last_reap = time.monotonic()
        while True:
            await asyncio.sleep(min(reap_every, self.demand_check_s) if self.demand_waiting else reap_every)
            if time.monotonic() - last_reap >= reap_every:
                self.reap()
                last_reap = time.monotonic()
            await self.yield_to_demand()

    async def yield_to_demand(self) -> bool:
        """Releases the oldest idle group when other work waits for resources; True if one went."""
        if not self._idle or self.demand_waiting is None:
            return False
        try:
            waiting = await self.demand_waiting()
        except Exception as exc:  # noqa: BLE001 - no answer: keep the groups, ask again next time
            log.debug("could not read the cluster's pending demand: %s", exc)
            return False
        if waiting and self.evict_oldest():
            log.info("released an idle worker group: other work waits for resources")
            metrics.POOL_REQUESTS.labels(result="yielded").inc()
            return True
        return False

    def idle_resources(self) -> dict[str, float]:
        """What idle groups hold: reserved in Ray, yet free for any run (they are evicted)."""
        total: dict[str, float] = {}
        for idle in self._idle:
            for name, amount in bundle(idle.group.spec.resources).items():
                total[name] = total.get(name, 0.0) + amount * idle.group.spec.num_workers
        return total

    def idle_resources_by_node(self) -> dict[str, dict[str, float]]:
        """idle_resources() by the node each idle worker holds them on."""
        nodes: dict[str, dict[str, float]] = {}
        for idle in self._idle:
            for worker in idle.group.workers:
                held = nodes.setdefault(worker.node_id, {})
                for name, amount in bundle(idle.group.spec.resources).items():
                    held[name] = held.get(name, 0.0) + amount
        return nodes

    def idle_count(self) -> int:
        return len(self._idle)

    def shutdown(self) -> None:
        while self.evict_oldest():
            pass

    def forget(self) -> None:
        """Drops every idle group without calling Ray: their cluster is gone, and with it
        their actors and reservations."""
        self._idle.clear()
        metrics.POOL_IDLE_GROUPS.set(0)

    def _take_idle(self, spec: GroupSpec) -> WorkerGroup | None:
        # Most recently used first: it is the least likely to be reaped.
        for idle in reversed(self._idle):
            if idle.group.spec == spec:
                self._idle.remove(idle)
                metrics.POOL_IDLE_GROUPS.set(len(self._idle))
                return idle.group
        return None

    async def _responds(self, group: WorkerGroup) -> bool:
        try:
            await asyncio.wait_for(asyncio.gather(*(a.info.remote() for a in group.actors)), timeout=10)
        except Exception as exc:  # noqa: BLE001 - any failure means the group is gone
            log.warning("warm group %d did not respond (%s); starting a new one", group.id, exc)
            return False
        return True

    async def _wait_placed(self, group: WorkerGroup) -> None:
        ready = asyncio.ensure_future(_await(group.ready()))
        try:
            while True:
                done, _ = await asyncio.wait({ready}, timeout=self.evict_after_s)
                if done:
                    ready.result()
                    return
                if self.evict_oldest():
                    log.info("evicted an idle worker group to place group %d", group.id)
        finally:
            if not ready.done():
                ready.cancel()
                with contextlib.suppress(BaseException):
                    await ready


async def _await(ref):
    return await ref


def pending_demand(gcs_address: str) -> bool:
    """Whether tasks, actors or placement groups wait for resources on the cluster now (Ray's
    autoscaler state, which the GCS keeps also when no autoscaler runs). Blocking: call it in
    a thread while the connection is up."""
    from ray.autoscaler.v2.sdk import get_cluster_status

    demands = get_cluster_status(gcs_address).resource_demands
    return bool(demands.ray_task_actor_demand or demands.placement_group_demand)
