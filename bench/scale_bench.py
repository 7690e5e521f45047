"""python -m bench scale: how the scheduler grows with the number of queued jobs.

At each level (1k, 10k, 100k queued jobs in a full run) on a private redis-server started as
the local stack starts it (services/localstack/redis_process.py), with the real scheduler
process (dispatcher off, so the jobs stay queued):
- memory per queued job: Redis `used_memory` grown by the fill, over the jobs, against
  python-rq's `enqueue` of the same jobs into the same Redis (the baseline of `bench
  scheduler`);
- CreateJob latency at that level (p50, p99 of sequential creates from a client process);
- ListJobs' first page (the newest 100) latency;
- a dispatch pass's reads: the queue window (ZRANGE) and its job records (`JobStore`), the
  Redis work of every pass, which must not grow with the queue.

Ratios (bench/README.md has them with the others). The targets are issue 13's goals
(<= 2 KB per queued job; "flatten what grows", read as: at most twice the smallest level's
figure at 100 times the jobs):
- bytes_per_job_vs_goal: bytes per queued job at the largest level over 2,048;
- memory_vs_rq: bytes per queued job, ours over rq's, at the largest level (reported);
- create_p99_growth: CreateJob p99 at the largest level over the smallest;
- window_read_growth: the dispatch window's read time at the largest level over the smallest.
One round per level (a fill of 100k jobs is the round); `rounds` repeats the whole curve.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

from bench import harness
from bench.scheduler_bench import CONFIG, ENTRYPOINT, _measure
from bench.scheduler_process import scheduler_on_private_redis

TARGETS = {"bytes_per_job_vs_goal": "<= 1.0", "create_p99_growth": "<= 2.0", "window_read_growth": "<= 2.0"}
GOAL_BYTES_PER_JOB = 2048
REPO = Path(__file__).resolve().parent.parent


def _used_memory(client) -> int:
    return int(client.info("memory")["used_memory"])


def _rq_fill(redis_url: str, jobs: int) -> None:
    import redis
    from rq import Queue

    queue = Queue("bench", connection=redis.Redis.from_url(redis_url))
    with queue.connection.pipeline() as pipe:
        for _ in range(jobs):
            queue.enqueue(ENTRYPOINT.replace(":", "."), kwargs={"config": CONFIG}, meta={"team": "bench"}, pipeline=pipe)
            if len(pipe.command_stack) > 2000:
                pipe.execute()
        pipe.execute()


async def _list_first_page(address: str, calls: int) -> float:
    from grpc import aio

    from paddleray.scheduler.v1 import job_service_pb2 as js
    from paddleray.scheduler.v1 import job_service_pb2_grpc

    times = []
    async with aio.insecure_channel(address) as channel:
        stub = job_service_pb2_grpc.JobServiceStub(channel)
        await stub.ListJobs(js.ListJobsRequest(page_size=1))
        for _ in range(calls):
            started = time.perf_counter()
            await stub.ListJobs(js.ListJobsRequest(page_size=100))
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


async def _window_read(redis_url: str, window: int, calls: int) -> float:
    from redis import asyncio as aioredis

    from paddleray.services.scheduler.store import JobStore

    client = aioredis.Redis.from_url(redis_url)
    store = JobStore(client)
    times = []
    try:
        for _ in range(calls):
            started = time.perf_counter()
            await store.get_many(await store.queue_head(window))
            times.append(time.perf_counter() - started)
    finally:
        await client.aclose()
    return statistics.median(times) * 1000


def _level(address: str, redis_url: str, flush, jobs: int, probes: int) -> dict:
    flush.flushdb()
    time.sleep(0.2)
    before = _used_memory(flush)
    fill = _measure("grpc", address, jobs, 32)
    ours_bytes = (_used_memory(flush) - before) / jobs
    latency = _measure("grpc", address, probes, 1)
    list_ms = asyncio.run(_list_first_page(address, 50))
    window_ms = asyncio.run(_window_read(redis_url, 64, 50))
    flush.flushdb()
    time.sleep(0.2)
    before = _used_memory(flush)
    _rq_fill(redis_url, jobs)
    rq_bytes = (_used_memory(flush) - before) / jobs
    return {"jobs": jobs, "fill_jobs_per_s": round(fill["jobs_per_s"], 1), "bytes_per_job": round(ours_bytes, 1),
            "rq_bytes_per_job": round(rq_bytes, 1), "create_p50_ms": round(latency["p50_ms"], 3),
            "create_p99_ms": round(latency["p99_ms"], 3), "list_first_page_ms": round(list_ms, 3),
            "window_read_ms": round(window_ms, 3)}


def run(quick: bool, smoke: bool = False) -> dict:
    import redis

    from paddleray.services.localstack.redis_process import MEMORY_ARGS

    levels, probes, rounds = ([200, 1000], 50, 1) if smoke else ([1000, 10000], 300, 1) if quick else (
        [1000, 10000, 100000], 500, 2)
    curves: list[list[dict]] = []
    with scheduler_on_private_redis("bench-scale-") as service:
        flush = redis.Redis.from_url(service.redis_url)
        try:
            _measure("grpc", service.address, 100, 8)  # warm: imports, script cache, connections
            for _ in range(rounds):
                curves.append([_level(service.address, service.redis_url, flush, jobs, probes) for jobs in levels])
        finally:
            flush.close()

    def at(index: int, key: str) -> list[float]:
        return [curve[index][key] for curve in curves]

    per_round = {
        "bytes_per_job_vs_goal": [b / GOAL_BYTES_PER_JOB for b in at(-1, "bytes_per_job")],
        "memory_vs_rq": harness.paired(at(-1, "bytes_per_job"), at(-1, "rq_bytes_per_job")),
        "create_p99_growth": harness.paired(at(-1, "create_p99_ms"), at(0, "create_p99_ms")),
        "window_read_growth": harness.paired(at(-1, "window_read_ms"), at(0, "window_read_ms")),
    }
    ratios: dict[str, float | None] = {key: round(harness.median(values), 3) for key, values in per_round.items()}
    metrics = {
        f"{key}_at_{jobs}": harness.median([curve[i][key] for curve in curves])
        for i, jobs in enumerate(levels)
        for key in ("bytes_per_job", "rq_bytes_per_job", "create_p50_ms", "create_p99_ms", "list_first_page_ms",
                    "window_read_ms", "fill_jobs_per_s")
    }
    params = {"levels": levels, "probes": probes, "rounds": rounds, "window": 64, "curves": curves,
              "redis": f"private redis-server, no persistence, {' '.join(MEMORY_ARGS)} (as the local stack)"}
    jobs_each = sum(levels) * rounds
    return harness.result("scale", params, metrics, ratios, TARGETS, per_round=per_round,
                          sides={"paddleray_jobs": jobs_each, "rq_jobs": jobs_each})
