"""Jobs the cluster can never hold are parked apart from the queue (issue 21, point 7): at any
depth they cost the queue nothing, and they come back when the cluster grows."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from paddleray.scheduler.v1 import job_pb2
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.services.common import identity
from paddleray.services.scheduler import keys
from support.fake_trainer import FakeTrainer
from support.scheduler import make_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
J = job_pb2.JobState
NEVER = "needs 64 CPUs; the cluster has 2"


async def _wait_state(stack, name: str, state: int, timeout: float = 60) -> job_pb2.Job:
    async with asyncio.timeout(timeout):
        while (job := await stack.get(name)).state != state:
            await asyncio.sleep(0.05)
        return job


async def _create_many(stack, count: int, prefix: str, **job) -> None:
    """Through the JobManager (CreateJob's domain call), 500 at a time: gRPC would only slow the
    filling down, and what is under test is the dispatcher behind it. The caller is the one
    CreateJob has with auth off (LOCAL)."""
    for start in range(0, count, 500):
        await asyncio.gather(*(
            stack.app.manager.create(make_job(**job), job_id=f"{prefix}-{i}", caller=identity.LOCAL)
            for i in range(start, min(count, start + 500))
        ))


async def test_a_job_that_fits_runs_behind_10000_that_never_can(stack_factory, redis_url):
    """Behind 1,100 such jobs a fitting one once stayed QUEUED for good: a pass scanned at most
    16 windows of the queue's head and never reached it."""
    async with stack_factory(cpus=2) as stack:
        await _create_many(stack, 10_000, "huge", cpus=4, workers=16, priority=10)
        await stack.create(make_job(cpus=1, config={"hang": True}), job_id="small")
        await _wait_state(stack, "jobs/small", J.JOB_STATE_RUNNING, timeout=120)
        client = aioredis.Redis.from_url(redis_url)
        try:
            assert await client.zcard(keys.parked()) == 10_000
            assert await client.zcard(keys.queue()) == 0
        finally:
            await client.aclose()
        huge = await stack.get("jobs/huge-9999")
        assert huge.state == J.JOB_STATE_QUEUED and huge.state_reason == NEVER


async def test_parked_jobs_go_back_in_order_when_the_cluster_grows(stack_factory):
    async with stack_factory(cpus=2) as stack:
        for i in range(3):
            await stack.create(make_job(cpus=4, config={"hang": True}, priority=i), job_id=f"big-{i}")
        for i in range(3):
            job = await _wait_reason(stack, f"jobs/big-{i}", "needs 4 CPUs; the cluster has 2")
            assert job.state == J.JOB_STATE_QUEUED
        stack.fake.total.num_cpus = 8  # a node joined: two of them fit now, the highest priority first
        await _wait_state(stack, "jobs/big-2", J.JOB_STATE_RUNNING)
        await _wait_state(stack, "jobs/big-1", J.JOB_STATE_RUNNING)
        waiting = await stack.get("jobs/big-0")
        assert waiting.state == J.JOB_STATE_QUEUED and "the cluster has" not in waiting.state_reason


async def test_a_parked_job_can_be_cancelled(stack_factory, redis_url):
    async with stack_factory(cpus=2) as stack:
        await stack.create(make_job(cpus=64), job_id="huge")
        await _wait_reason(stack, "jobs/huge", NEVER)
        cancelled = (await stack.stub.CancelJob(js.CancelJobRequest(name="jobs/huge"))).job
        assert cancelled.state == J.JOB_STATE_CANCELLED
        client = aioredis.Redis.from_url(redis_url)
        try:
            assert await client.zcard(keys.parked()) == 0 and await client.zcard(keys.queue()) == 0
        finally:
            await client.aclose()


async def _wait_reason(stack, name: str, reason: str, timeout: float = 30) -> job_pb2.Job:
    async with asyncio.timeout(timeout):
        while (job := await stack.get(name)).state_reason != reason:
            await asyncio.sleep(0.05)
        return job


async def test_a_rank_is_not_dispatched_onto_nodes_that_only_together_have_room(stack_factory):
    """Per-node fit (issue 23): 2 CPUs free in the cluster, 1 on each node, and a rank needing
    2 waits, saying why, until one node has them."""
    fake = FakeTrainer(node_cpus=[2, 2])
    async with stack_factory(fake=fake) as stack:
        for name in ("a", "b"):
            await stack.create(make_job(cpus=1, config={"hang": True}), job_id=name)
            await _wait_state(stack, f"jobs/{name}", J.JOB_STATE_RUNNING)
        assert sorted(n for nodes in fake.placement.values() for n in nodes) == [0, 1]
        await stack.create(make_job(cpus=2, config={"hang": True}), job_id="wide")
        waiting = await _wait_reason(stack, "jobs/wide", "no node has 2 CPUs free; largest free: 1")
        assert waiting.state == J.JOB_STATE_QUEUED and fake.job_start_calls["jobs/wide"] == 0
        await stack.stub.CancelJob(js.CancelJobRequest(name="jobs/a"))
        await _wait_state(stack, "jobs/wide", J.JOB_STATE_RUNNING)
        assert not fake.overcommitted


async def test_jobs_sent_but_not_yet_placed_are_booked_onto_nodes(stack_factory):
    """Three 1-CPU jobs on two nodes of 1.5 CPUs: the cluster has room for all three, the nodes
    for two. Ray takes a while to place a run (here the trainer answers StartRun after 0.5 s),
    so the third must be held back by what the first two will take, not sent on the view of
    nodes that do not show them yet."""
    fake = FakeTrainer(node_cpus=[1.5, 1.5])
    fake.start_delay_s = 0.5
    async with stack_factory(fake=fake) as stack:
        for i in range(3):
            await stack.create(make_job(cpus=1, config={"hang": True}), job_id=f"one-{i}")
        await _wait_state(stack, "jobs/one-1", J.JOB_STATE_RUNNING)
        waiting = await _wait_reason(stack, "jobs/one-2", "no node has 1 CPU free; largest free: 0.5")
        assert waiting.state == J.JOB_STATE_QUEUED
        assert not fake.overcommitted and fake.job_start_calls["jobs/one-2"] == 0


async def test_a_job_asking_for_a_resource_no_node_has_waits_saying_so_until_one_joins(stack_factory):
    """Issue 19: it went to the trainer and stayed STARTING ('dispatched'): Ray kept its placement
    group pending for ever."""
    async with stack_factory(cpus=2) as stack:
        job = make_job(cpus=1, config={"hang": True})
        job.spec.resources_per_worker.custom["tpu"] = 1
        await stack.create(job, job_id="tpu")
        waiting = await _wait_reason(stack, "jobs/tpu", "needs resource 'tpu': no node has it")
        assert waiting.state == J.JOB_STATE_QUEUED and stack.fake.job_start_calls["jobs/tpu"] == 0
        stack.fake.total.custom["tpu"] = 4  # a node with TPUs joined: the cluster's shape changed
        await _wait_state(stack, "jobs/tpu", J.JOB_STATE_RUNNING)
