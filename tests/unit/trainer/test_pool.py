"""WorkerPool bookkeeping (capacity, most-recent-first reuse, TTL, idle reservations) without Ray."""

from __future__ import annotations

import pytest

from paddleray.services.trainer.pool import WorkerPool
from paddleray.services.trainer.spec import EnvSpec, GroupSpec, WorkerResources
from paddleray.services.trainer.worker_group import WorkerGroup

pytestmark = pytest.mark.unit

PAIR = GroupSpec(num_workers=2, resources=WorkerResources(num_cpus=1, memory_bytes=100))
SINGLE = GroupSpec(num_workers=1, resources=WorkerResources(num_cpus=0.5, num_gpus=0.5))


def _group(spec: GroupSpec) -> WorkerGroup:
    # No actors and no placement group: kill() has nothing to free but marks the group dead.
    return WorkerGroup(spec, placement=None)


def test_release_keeps_healthy_groups_up_to_capacity():
    pool = WorkerPool(max_idle_groups=2)
    first, second, third = _group(PAIR), _group(PAIR), _group(SINGLE)
    for group in (first, second, third):
        pool.release(group, reusable=True)
    assert pool.idle_count() == 2 and not first.alive, "the oldest idle group makes room"
    assert pool._take_idle(PAIR) is second
    assert pool._take_idle(PAIR) is None
    assert pool._take_idle(SINGLE) is third


def test_failed_and_working_dir_groups_are_not_kept():
    pool = WorkerPool()
    failed = _group(PAIR)
    pool.release(failed, reusable=False)
    shipped = _group(GroupSpec(env=EnvSpec(working_dir="gcs://_ray_pkg_abc.zip")))
    pool.release(shipped, reusable=True)
    assert pool.idle_count() == 0 and not failed.alive and not shipped.alive


def test_most_recently_used_group_is_reused_first():
    pool = WorkerPool()
    older, newer = _group(PAIR), _group(PAIR)
    pool.release(older, reusable=True)
    pool.release(newer, reusable=True)
    assert pool._take_idle(PAIR) is newer


def test_ttl_and_eviction():
    pool = WorkerPool(idle_ttl_s=10)
    pool.release(_group(PAIR), reusable=True)
    assert pool.reap() == 0
    assert pool.reap(now=10**9) == 1 and pool.idle_count() == 0
    pool.release(_group(SINGLE), reusable=True)
    assert pool.evict_oldest() and not pool.evict_oldest()


def test_idle_reservations_add_up():
    pool = WorkerPool()
    pool.release(_group(PAIR), reusable=True)
    pool.release(_group(SINGLE), reusable=True)
    assert pool.idle_resources() == {"CPU": 2.5, "memory": 200.0, "GPU": 0.5}


async def test_a_warm_group_is_killed_when_acquire_is_cancelled_while_checking_it():
    import asyncio

    pool = WorkerPool()
    warm = _group(PAIR)
    pool.release(warm, reusable=True)
    checking = asyncio.Event()

    async def hangs(group):
        checking.set()
        await asyncio.Event().wait()

    pool._responds = hangs
    acquire = asyncio.ensure_future(pool.acquire(PAIR))
    await asyncio.wait_for(checking.wait(), 5)
    acquire.cancel()
    with pytest.raises(asyncio.CancelledError):
        await acquire
    assert not warm.alive and pool.idle_count() == 0, "a group taken from the pool is freed, not lost"


def test_idle_reservations_by_node_follow_their_workers():
    from paddleray.services.trainer.records import WorkerInfo

    pool = WorkerPool()
    spread = _group(PAIR)
    spread.workers = [WorkerInfo(node_id="a"), WorkerInfo(node_id="b")]
    single = _group(SINGLE)
    single.workers = [WorkerInfo(node_id="a")]
    pool.release(spread, reusable=True)
    pool.release(single, reusable=True)
    assert pool.idle_resources_by_node() == {"a": {"CPU": 1.5, "memory": 100.0, "GPU": 0.5},
                                             "b": {"CPU": 1.0, "memory": 100.0}}
