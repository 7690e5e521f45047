"""python -m bench scheduler: CreateJob over gRPC vs python-rq `enqueue`, same jobs, same Redis.

create_vs_rq: jobs/s of CreateJob at 32 concurrent clients (a grpc.aio client on uvloop in a
process of its own, each job with a request_id so it is idempotent, acknowledged only once
durable in Redis) against python-rq's Queue.enqueue of the same jobs from 32 threads of one
process, as a web app using rq would. Measured A B A B, medians; 1 client is reported too.
The scheduler runs as its real process (`python -m paddleray.services.scheduler`), with the
dispatcher off so that only the create path is measured; Redis is a private redis-server
started for the run and flushed between measurements. The scheduler binds port 0 and reports
its port in its ready file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench import harness
from bench.scheduler_process import scheduler_on_private_redis

ENTRYPOINT = "paddleray.services.trainer.examples.digits_mlp:train"
TARGETS = {"create_vs_rq": ">= 1.0"}
CONFIG: dict[str, Any] = {"epochs": 3, "batch_size": 64, "optimizer": {"name": "adam", "lr": 0.001}, "hidden": [128, 64]}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(latencies: list[float], elapsed: float) -> dict:
    return {"jobs": len(latencies), "jobs_per_s": len(latencies) / elapsed, "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": _percentile(latencies, 0.99) * 1000}


# -- clients (each runs in a process of its own) --------------------------------------------

async def _grpc_client(address: str, jobs: int, concurrency: int) -> dict:
    from grpc import aio

    from paddleray.scheduler.v1 import job_pb2, job_service_pb2_grpc
    from paddleray.scheduler.v1 import job_service_pb2 as js

    job = job_pb2.Job(priority=5, labels={"team": "bench"})
    job.spec.entrypoint = ENTRYPOINT
    job.spec.resources_per_worker.num_cpus = 1
    job.spec.config.update(CONFIG)
    prefix = uuid.uuid4().hex[:8]
    latencies: list[float] = []
    async with aio.insecure_channel(address) as channel:
        stub = job_service_pb2_grpc.JobServiceStub(channel)
        await stub.ListJobs(js.ListJobsRequest(page_size=1))  # connect before timing

        async def worker(worker_id: int) -> None:
            for i in range(worker_id, jobs, concurrency):
                started = time.perf_counter()
                await stub.CreateJob(js.CreateJobRequest(job=job, request_id=f"{prefix}-{i}"))
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        elapsed = time.perf_counter() - started
    return _summary(latencies, elapsed)


def _rq_client(redis_url: str, jobs: int, concurrency: int) -> dict:
    import redis
    from rq import Queue

    queue = Queue("bench", connection=redis.Redis.from_url(redis_url))
    queue.connection.ping()
    latencies: list[float] = []

    def enqueue(worker_id: int) -> None:
        for _ in range(worker_id, jobs, concurrency):
            started = time.perf_counter()
            queue.enqueue(ENTRYPOINT.replace(":", "."), kwargs={"config": CONFIG}, meta={"team": "bench"})
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(enqueue, range(concurrency)))
    elapsed = time.perf_counter() - started
    return _summary(latencies, elapsed)


def _client_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["grpc", "rq"])
    parser.add_argument("--target", required=True)
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    args = parser.parse_args(argv)
    if args.kind == "grpc":
        import uvloop

        out = uvloop.run(_grpc_client(args.target, args.jobs, args.concurrency))
    else:
        out = _rq_client(args.target, args.jobs, args.concurrency)
    print(json.dumps(out))


def _measure(kind: str, target: str, jobs: int, concurrency: int) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "bench.scheduler_bench", "client", kind, "--target", target, "--jobs", str(jobs),
         "--concurrency", str(concurrency)],
        check=True, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- the benchmark -----------------------------------------------------------------------------

def run(quick: bool, smoke: bool = False) -> dict:
    import redis

    rounds, jobs_c32, jobs_c1, warm_up = (1, 200, 50, 100) if smoke else (3, 4000, 500, 1000) if quick else (5, 10000, 1500, 1000)
    samples: dict[str, list[dict]] = {k: [] for k in ("grpc_c32", "rq_c32", "grpc_c1", "rq_c1")}
    with scheduler_on_private_redis("bench-scheduler-") as service:
        address, redis_url = service.address, service.redis_url
        flush = redis.Redis.from_url(redis_url)
        try:
            # A service runs for long: warm it (imports, script cache, connection pool) untimed.
            _measure("grpc", address, warm_up, 32)
            for _ in range(rounds):
                for name, kind, target, jobs, conc in (
                    ("grpc_c32", "grpc", address, jobs_c32, 32), ("rq_c32", "rq", redis_url, jobs_c32, 32),
                    ("grpc_c1", "grpc", address, jobs_c1, 1), ("rq_c1", "rq", redis_url, jobs_c1, 1),
                ):
                    flush.flushdb()
                    samples[name].append(_measure(kind, target, jobs, conc))
        finally:
            flush.close()

    def med(name: str, key: str) -> float:
        return round(statistics.median(s[key] for s in samples[name]), 2)

    def per_round(a: str, b: str) -> list[float]:
        return harness.paired([s["jobs_per_s"] for s in samples[a]], [s["jobs_per_s"] for s in samples[b]])

    metrics = {f"{name}_{key}": med(name, key) for name in samples for key in ("jobs_per_s", "p50_ms", "p99_ms")}
    metrics["create_p99_ms_c32"] = metrics["grpc_c32_p99_ms"]
    ratios: dict[str, float | None] = {
        "create_vs_rq": round(metrics["grpc_c32_jobs_per_s"] / metrics["rq_c32_jobs_per_s"], 3),
        "create_vs_rq_c1": round(metrics["grpc_c1_jobs_per_s"] / metrics["rq_c1_jobs_per_s"], 3),
    }
    params = {"rounds": rounds, "jobs_c32": jobs_c32, "jobs_c1": jobs_c1,
              "redis": "private redis-server, no persistence (both sides alike)", "samples": samples}
    # Jobs acknowledged by each side (CreateJob: once durable in Redis; rq: once enqueued).
    sides = {name: sum(s["jobs"] for s in samples[name]) for name in samples}
    return harness.result(
        "scheduler", params, metrics, ratios, TARGETS,
        per_round={"create_vs_rq": per_round("grpc_c32", "rq_c32"), "create_vs_rq_c1": per_round("grpc_c1", "rq_c1")},
        sides=sides,
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["client"]:
        _client_main(sys.argv[2:])
    else:
        print(json.dumps(run(quick="--quick" in sys.argv)))
