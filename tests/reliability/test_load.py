"""Load: thousands of jobs created, paged through and cancelled on one real scheduler.

The scheduler runs in-process behind a real gRPC server, on the session's redis-server, with
the scripted trainer behind it holding 1 CPU, which one hanging job takes: every job after it
asks for 1 CPU, fits the empty cluster (so it is a real dispatch candidate, read by every
dispatch pass) and stays QUEUED. The client sends over one channel, IN_FLIGHT calls at a time.

CI creates 2,000 jobs (about 30 s on 2 shared cores; 10,000 took 127 s); soak mode
(PADDLERAY_SOAK=1) the issue's 10,000, or PADDLERAY_LOAD_JOBS sets the number. Counts and states are asserted;
speeds are only recorded (tests/reliability/results/load.json, for docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time

import pytest
import redis
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from paddleray.scheduler.v1 import job_pb2, job_service_pb2_grpc
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.services.scheduler.__main__ import registrations
from paddleray.services.scheduler.app import SchedulerApp
from paddleray.services.scheduler.settings import SchedulerSettings
from reliability.harness import LoopThread, soak
from support import results
from support.exporter import AppThread
from support.fake_trainer import FakeTrainer, start_fake_trainer
from support.scheduler import make_job

J = job_pb2.JobState
JOBS = int(os.environ.get("PADDLERAY_LOAD_JOBS", 10_000 if soak() else 2_000))
pytestmark = pytest.mark.timeout(240 if JOBS <= 2_000 else 1800)
IN_FLIGHT = 32
PAGE_SIZE = 500


@pytest.fixture
def scheduler(redis_url):
    fake_loop = LoopThread()
    fake_server, fake_address = fake_loop.run(start_fake_trainer(FakeTrainer(cpus=1)))
    config = SchedulerSettings(port=0, redis_url=redis_url, trainer_address=fake_address, dispatch_interval_s=0.25,
                               grace_period_s=0, stop_wait_s=2, entrypoint_allowlist=["pkg"])
    app = AppThread(config, SchedulerApp, registrations)
    yield app
    app.stop()
    fake_loop.run(fake_server.stop(0.2))
    fake_loop.stop()


async def _each(calls, handle) -> list[float]:
    """Runs every coroutine factory in `calls`, IN_FLIGHT at a time, passing each result to
    `handle`; returns each call's latency in seconds."""
    latencies: list[float] = []
    pending = iter(calls)

    async def worker():
        for call in pending:
            begin = time.perf_counter()
            handle(await call())
            latencies.append(time.perf_counter() - begin)

    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    return latencies


async def _pages(jobs, **filters) -> tuple[list[job_pb2.Job], list[int]]:
    """Every job over ListJobs' pages (BASIC view), and each page's size."""
    found, sizes, token = [], [], ""
    while True:
        page = await jobs.ListJobs(js.ListJobsRequest(page_size=PAGE_SIZE, page_token=token,
                                                      view=job_pb2.JOB_VIEW_BASIC, **filters), timeout=30)
        found.extend(page.jobs)
        sizes.append(len(page.jobs))
        if not (token := page.next_page_token):
            return found, sizes


def _rate_and_latency(latencies: list[float], seconds: float) -> dict:
    ms = sorted(x * 1000 for x in latencies)
    return {"per_s": round(len(ms) / seconds), "p50_ms": round(statistics.median(ms), 1),
            "p99_ms": round(ms[int(len(ms) * 0.99) - 1], 1), "seconds": round(seconds, 2)}


async def _until_running(jobs, name: str) -> None:
    async with asyncio.timeout(30):
        while (await jobs.GetJob(js.GetJobRequest(name=name))).job.state != J.JOB_STATE_RUNNING:
            await asyncio.sleep(0.05)


async def test_jobs_created_paginated_and_cancelled(scheduler, redis_url):
    store = redis.Redis.from_url(redis_url)
    async with aio.insecure_channel(scheduler.address) as channel:
        jobs = job_service_pb2_grpc.JobServiceStub(channel)
        blocker = (await jobs.CreateJob(js.CreateJobRequest(job=make_job(config={"hang": True})))).job.name
        await _until_running(jobs, blocker)
        expected = {f"jobs/load-{i:05d}" for i in range(JOBS)}
        memory_before = store.info("memory")["used_memory"]

        created: list[job_pb2.Job] = []
        begin = time.perf_counter()
        latencies = await _each(
            [lambda i=i: jobs.CreateJob(js.CreateJobRequest(job=make_job(), job_id=f"load-{i:05d}"), timeout=60)
             for i in range(JOBS)],
            lambda response: created.append(response.job))
        create = _rate_and_latency(latencies, time.perf_counter() - begin)
        memory_per_job = (store.info("memory")["used_memory"] - memory_before) / JOBS
        assert {j.name for j in created} == expected

        begin = time.perf_counter()
        listed, sizes = await _pages(jobs)
        paging_s = time.perf_counter() - begin
        names = [j.name for j in listed if j.name != blocker]
        assert len(names) == len(set(names)) == JOBS  # none listed twice
        assert set(names) == expected  # none missing, none foreign
        assert max(sizes) <= PAGE_SIZE
        # Every one is still waiting for the blocker's CPU: the dispatcher started none.
        assert {j.state for j in listed if j.name != blocker} == {J.JOB_STATE_QUEUED}

        cancelled: list[job_pb2.Job] = []
        begin = time.perf_counter()
        latencies = await _each([lambda n=n: jobs.CancelJob(js.CancelJobRequest(name=n), timeout=60) for n in names],
                                lambda response: cancelled.append(response.job))
        cancel = _rate_and_latency(latencies, time.perf_counter() - begin)
        assert len(cancelled) == JOBS and {j.state for j in cancelled} == {J.JOB_STATE_CANCELLED}
        ended, _ = await _pages(jobs, states=[J.JOB_STATE_CANCELLED])
        assert sorted(j.name for j in ended) == sorted(expected)
        assert (await _pages(jobs, states=[J.JOB_STATE_QUEUED]))[0] == []

        await jobs.CancelJob(js.CancelJobRequest(name=blocker), timeout=30)
        health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
    store.close()
    results.write("load.json", {
        "jobs": JOBS, "in_flight": IN_FLIGHT,
        "profile": "soak" if soak() else ("PADDLERAY_LOAD_JOBS" if "PADDLERAY_LOAD_JOBS" in os.environ else "ci"),
        "create": create, "cancel": cancel,
        "pagination": {"seconds": round(paging_s, 2), "pages": len(sizes), "page_size": PAGE_SIZE},
        "redis_bytes_per_queued_job": round(memory_per_job),
    })
