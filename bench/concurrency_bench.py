"""python -m bench concurrency: many single-rank runs at once on a multi-node local cluster.

The cluster is `paddleray up --nodes 2` as a person starts it (a head without CPUs, two worker
nodes of 2 CPUs, each its own raylet; the services pointed at the head). At each level (10,
50, 200 concurrent runs in a full run) N runs of a tiny function (bench/concurrency_entry.py:
report a metric every 0.25 s until released) at `num_cpus` 0.01 are submitted at once through
the scheduler (CreateJob from 32 concurrent calls), each followed by a WatchJob stream:
- dispatch rate: N over the time from the first submit to the last run's first metric;
- submit -> first metric, p50 and p99 (the metric event as WatchJob delivers it);
- with all N live, over a window: the trainer's CPU (fraction of a core) and RSS growth per
  live run, Redis `used_memory` growth per running job, and the events per second the WatchJob
  streams deliver;
- then every run is released; wall time = first submit -> every job SUCCEEDED.
Beside it, Ray Tune runs the same N trials of the same function with the same resources on
the same cluster, all at once, released once each has reported (bench/concurrency_tune.py).

Ratios (targets: bench/README.md), per round, largest level over
smallest as `bench scale` reads growth:
- dispatch_growth: dispatch rate (>= 0.67: a rate may fall by a third at 20x the runs);
- first_metric_p99_growth, trainer_mem_per_run_growth: (<= 1.5);
- concurrent_vs_tune: the largest level's wall time, paddleray over Tune (<= 0.5).
Fractional packing (issue 23 point 2) is measured here too, on one 2-CPU node: trials of
num_cpus 1.0, 0.5 and 0.25 (the same function, pinned to node-1), how many run at once (the
node's capacity over the fraction) and how many finish per second from one batch of 8
(`packing_*` metrics; throughput_vs_whole_* ratios are reported, not targets).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench import harness
from paddleray.services.localstack.ray_head import AUTH_ENV

REPO = Path(__file__).resolve().parent.parent
ENTRYPOINT = "bench.concurrency_entry:hold"
TARGETS = {"dispatch_growth": ">= 0.67", "first_metric_p99_growth": "<= 1.5", "trainer_mem_per_run_growth": "<= 1.5",
           "concurrent_vs_tune": "<= 0.5"}
NUM_CPUS = 0.01
REPORT_S = 0.25
NODES, NODE_CPUS = 2, 2
# Job states whose first event times split the first-metric latency (Level._split).
_PHASES = {2: "starting", 3: "running"}  # JOB_STATE_STARTING, JOB_STATE_RUNNING
PACKING_FRACTIONS = (1.0, 0.5, 0.25)
# Overrides the levels (comma-separated run counts, smallest first): every live run is a Ray
# worker process of its own (~100 MB), so a host with less memory than the largest level needs
# runs a smaller largest level (the result's params say which levels ran).
LEVELS_ENV = "PADDLERAY_BENCH_CONCURRENCY_LEVELS"


def _job(config: dict, cpus: float, custom: dict[str, float] | None = None):
    from paddleray.services.cli.jobs_commands import build_job

    job = build_job(ENTRYPOINT, config, workers=1, cpus=cpus)
    job.spec.runtime_env.env_vars["PYTHONPATH"] = str(REPO)  # the workers import bench.concurrency_entry
    for key, value in (custom or {}).items():
        job.spec.resources_per_worker.custom[key] = value
    return job


class Level:
    """One level's runs under paddleray: submits, watches, measures while all are live, releases."""

    def __init__(self, state, n: int, workdir: Path, window_s: float) -> None:
        self.state, self.n, self.window_s = state, n, window_s
        self.release = workdir / f"release-{uuid.uuid4().hex[:8]}"
        self.submitted: dict[str, float] = {}
        self.first_metric: dict[str, float] = {}
        self.done: dict[str, int] = {}
        self.events = 0
        # Where submit -> first metric goes, per job, in the scheduler's event times (epoch s):
        # "submitted" (here), "starting" (dispatched), "running" (user code started), "metric".
        self.phases: dict[str, dict[str, float]] = {}

    async def _watch(self, stub, name: str) -> None:
        from paddleray.scheduler.v1 import job_service_pb2 as js
        from paddleray.services.common.states import JOB_TERMINAL

        async for response in stub.WatchJob(js.WatchJobRequest(name=name), timeout=1800):
            self.events += 1
            event = response.event
            kind = event.WhichOneof("payload")
            at = event.time.ToNanoseconds() / 1e9
            phases = self.phases.setdefault(name, {})
            if kind == "metrics":
                self.first_metric.setdefault(name, time.perf_counter())
                phases.setdefault("metric", at)
            elif kind == "state_change" and event.state_change.to_state in _PHASES:
                phases.setdefault(_PHASES[event.state_change.to_state], at)
            if kind == "state_change" and event.state_change.to_state in JOB_TERMINAL:
                self.done[name] = event.state_change.to_state
                return

    async def _submit(self, stub, gate: asyncio.Semaphore, watches: list) -> None:
        from paddleray.scheduler.v1 import job_service_pb2 as js

        job = _job({"release": str(self.release), "report_s": REPORT_S}, NUM_CPUS)
        async with gate:
            started, wall = time.perf_counter(), time.time()
            created = await stub.CreateJob(js.CreateJobRequest(job=job, request_id=uuid.uuid4().hex), timeout=120)
        self.submitted[created.job.name] = started
        self.phases.setdefault(created.job.name, {})["submitted"] = wall
        watches.append(asyncio.create_task(self._watch(stub, created.job.name)))

    async def run(self) -> dict:
        from grpc import aio

        from paddleray.scheduler.v1 import job_pb2, job_service_pb2_grpc

        trainer, redis = _Process(self.state.services["trainer"].pid), _redis(self.state)
        base_rss, base_redis = trainer.rss(), redis.info("memory")["used_memory"]
        async with aio.insecure_channel(self.state.address("scheduler")) as channel:
            stub = job_service_pb2_grpc.JobServiceStub(channel)
            gate, watches = asyncio.Semaphore(32), list[asyncio.Task]()
            first_submit = time.perf_counter()
            await asyncio.gather(*(self._submit(stub, gate, watches) for _ in range(self.n)))
            while len(self.first_metric) < self.n:
                if self.done:
                    raise RuntimeError(f"runs ended before every run was live: {self.done}")
                await asyncio.sleep(0.05)
            all_live = time.perf_counter()
            # Every run live: what each costs the trainer and Redis, and what the streams carry.
            cpu0, events0, t0 = trainer.cpu_s(), self.events, time.perf_counter()
            await asyncio.sleep(self.window_s)
            cpu1, events1, t1 = trainer.cpu_s(), self.events, time.perf_counter()
            live_rss, live_redis = trainer.rss(), redis.info("memory")["used_memory"]
            host_used = _host_memory_used()
            self.release.touch()
            await asyncio.gather(*watches)
            ended = time.perf_counter()
        redis.close()
        failed = {k: v for k, v in self.done.items() if v != job_pb2.JOB_STATE_SUCCEEDED}
        if failed:
            raise RuntimeError(f"{len(failed)} of {self.n} runs did not succeed: {sorted(failed)[:5]}")
        latencies = sorted(self.first_metric[name] - self.submitted[name] for name in self.submitted)
        return {
            "runs": self.n, "dispatch_per_s": round(self.n / (all_live - first_submit), 2),
            "first_metric_p50_s": round(_quantile(latencies, 0.5), 3),
            "first_metric_p99_s": round(_quantile(latencies, 0.99), 3),
            "trainer_cpu_per_run": round((cpu1 - cpu0) / (t1 - t0) / self.n, 5),
            "trainer_mem_per_run_mb": round(max(live_rss - base_rss, 0) / self.n / 2**20, 3),
            "trainer_rss_mb": round(live_rss / 2**20, 1),
            "host_mem_used_gb": round(host_used / 2**30, 2),
            "redis_bytes_per_job": round((live_redis - base_redis) / self.n, 1),
            "watch_events_per_s": round((events1 - events0) / (t1 - t0), 1),
            "wall_s": round(ended - first_submit, 3),
            **self._split(),
        }

    def _split(self) -> dict[str, float]:
        """Medians of submit -> dispatched (queue_wait), dispatched -> user code started
        (start), started -> first metric (first_report): where the first-metric latency goes."""
        steps = {"queue_wait": ("submitted", "starting"), "start": ("starting", "running"),
                 "first_report": ("running", "metric")}
        split = {}
        for key, (a, b) in steps.items():
            spans = [p[b] - p[a] for p in self.phases.values() if a in p and b in p]
            split[f"{key}_p50_s"] = round(statistics.median(spans), 3) if spans else float("nan")
            split[f"{key}_p99_s"] = round(_quantile(sorted(spans), 0.99), 3) if spans else float("nan")
        return split


class _Process:
    """RSS and CPU time of a service's process and every process below it, from /proc (Linux, as
    the machines that run the bench): the recorded pid may be a launcher of the service."""

    def __init__(self, pid: int) -> None:
        self._pid = pid

    def _tree(self) -> list[int]:
        from paddleray.services.localstack.ray_cluster import descendants

        return [self._pid, *descendants(self._pid)]

    def rss(self) -> int:
        total = 0
        for pid in self._tree():
            try:
                lines = Path(f"/proc/{pid}/status").read_text().splitlines()
            except OSError:
                continue  # gone meanwhile
            total += next((int(line.split()[1]) * 1024 for line in lines if line.startswith("VmRSS:")), 0)
        return total

    def cpu_s(self) -> float:
        total = 0
        for pid in self._tree():
            try:
                # "pid (comm) state ...": utime and stime are fields 14 and 15, counted after comm's ")".
                fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])
        return total / os.sysconf("SC_CLK_TCK")


def _host_memory_used() -> int:
    """The host's memory in use (MemTotal - MemAvailable, what `free` calls used), in bytes."""
    fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()}
    return fields["MemTotal"] - fields["MemAvailable"]


def _redis(state):
    import redis

    return redis.Redis.from_url(state.redis_url)


def _quantile(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1] if q < 1 else max(values)


def _tune(state, n: int, workdir: Path) -> dict:
    params = {"trials": n, "num_cpus": NUM_CPUS, "report_s": REPORT_S, "release": str(workdir / f"tune-{uuid.uuid4().hex[:8]}")}
    done = subprocess.run([sys.executable, "-m", "bench.concurrency_tune", state.ray_address, json.dumps(params)],
                          cwd=REPO, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, **AUTH_ENV, "PYTHONPATH": str(REPO)})
    if done.returncode != 0:
        raise RuntimeError(f"the Tune side failed: {done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["trials"] != n:
        raise RuntimeError(f"Tune ran {result['trials']} of {n} trials ({result['errors']} errors)")
    return result


async def _packing(state, fraction: float, batch: int, workdir: Path) -> dict:
    """`batch` runs of `fraction` CPU pinned to node-1: the most running at once, and runs/s."""
    from grpc import aio

    from paddleray.scheduler.v1 import job_pb2, job_service_pb2_grpc
    from paddleray.scheduler.v1 import job_service_pb2 as js
    from paddleray.services.common.states import JOB_TERMINAL
    from paddleray.services.localstack.ray_cluster import node_resource

    async with aio.insecure_channel(state.address("scheduler")) as channel:
        stub = job_service_pb2_grpc.JobServiceStub(channel)
        started = time.perf_counter()
        names = []
        for _ in range(batch):
            # About a second of work each (reports until max_s; never released early).
            job = _job({"release": str(workdir / "never"), "report_s": REPORT_S, "max_s": 1.0}, fraction,
                       {node_resource("node-1"): 0.001})
            names.append((await stub.CreateJob(js.CreateJobRequest(job=job, request_id=uuid.uuid4().hex))).job.name)
        most, states = 0, {}
        while True:
            jobs = await asyncio.gather(*(stub.GetJob(js.GetJobRequest(name=n)) for n in names))
            states = {r.job.name: r.job.state for r in jobs}
            most = max(most, sum(1 for s in states.values() if s == job_pb2.JOB_STATE_RUNNING))
            if all(s in JOB_TERMINAL for s in states.values()):
                break
            await asyncio.sleep(0.1)
        wall = time.perf_counter() - started
    if any(s != job_pb2.JOB_STATE_SUCCEEDED for s in states.values()):
        raise RuntimeError(f"packing at {fraction} CPU: not every run succeeded")
    return {"fraction": fraction, "most_running": most, "runs_per_s": round(batch / wall, 3), "wall_s": round(wall, 3)}


def run(quick: bool, smoke: bool = False) -> dict:
    from paddleray.services.localstack import stack

    levels, rounds, window_s, packing_batch = (([2, 4], 1, 0.5, 2) if smoke else ([10, 50], 1, 3.0, 8) if quick
                                               else ([10, 50, 200], 2, 5.0, 8))
    if os.environ.get(LEVELS_ENV):  # a host without the memory for the largest level's processes
        levels = [int(n) for n in os.environ[LEVELS_ENV].split(",")]
    # The smoke run (CI) keeps its minutes small: two packing fractions (the whole CPU and the
    # smallest) and short pauses; a handful of 0.01-CPU warm groups hold next to nothing, and
    # idle ones are evicted for a run that waits for their CPUs.
    fractions = (PACKING_FRACTIONS[0], PACKING_FRACTIONS[-1]) if smoke else PACKING_FRACTIONS
    expire_s = 0.5 if smoke else 4.0
    os.environ["PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST"] = json.dumps(["paddleray.services.trainer.examples",
                                                                        "bench.concurrency_entry"])
    # Warm groups left idle by one side's runs give their CPUs back before the other side starts.
    os.environ.setdefault("PADDLERAY_TRAINER_POOL_IDLE_TTL_S", "3")
    curves: list[list[dict]] = []
    tune: list[dict] = []
    packing: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="paddleray-concurrency-") as tmp:
        workdir = Path(tmp)
        state = stack.up(workdir / "stack", nodes=NODES, num_cpus=NODE_CPUS)
        try:
            if not smoke:
                asyncio.run(Level(state, 2, workdir, 0.2).run())  # warm: imports, connections, the first workers
            for _ in range(rounds):
                curve = []
                for n in levels:
                    curve.append(asyncio.run(Level(state, n, workdir, window_s).run()))
                    time.sleep(expire_s)  # the runs' warm groups expire (PADDLERAY_TRAINER_POOL_IDLE_TTL_S)
                curves.append(curve)
                tune.append(_tune(state, levels[-1], workdir))
                time.sleep(expire_s / 2)
            for fraction in fractions:
                packing.append(asyncio.run(_packing(state, fraction, packing_batch, workdir)))
                time.sleep(expire_s)
        finally:
            stack.down(workdir / "stack")

    def at(index: int, key: str) -> list[float]:
        return [curve[index][key] for curve in curves]

    per_round = {
        "dispatch_growth": harness.paired(at(-1, "dispatch_per_s"), at(0, "dispatch_per_s")),
        "first_metric_p99_growth": harness.paired(at(-1, "first_metric_p99_s"), at(0, "first_metric_p99_s")),
        "trainer_mem_per_run_growth": harness.paired([max(v, 1e-3) for v in at(-1, "trainer_mem_per_run_mb")],
                                                     [max(v, 1e-3) for v in at(0, "trainer_mem_per_run_mb")]),
        "concurrent_vs_tune": harness.paired(at(-1, "wall_s"), [t["wall_s"] for t in tune]),
    }
    # Unrounded: a tiny ratio (memory growth near the floor) rounded to 3 places is not its round's value.
    ratios: dict[str, float | None] = {key: harness.median(values) for key, values in per_round.items()}
    keys = ("dispatch_per_s", "first_metric_p50_s", "first_metric_p99_s", "trainer_cpu_per_run", "trainer_mem_per_run_mb",
            "redis_bytes_per_job", "watch_events_per_s", "wall_s", "queue_wait_p50_s", "queue_wait_p99_s", "start_p50_s",
            "start_p99_s", "first_report_p50_s", "first_report_p99_s", "host_mem_used_gb")
    metrics: dict = {f"{key}_at_{n}": harness.median([curve[i][key] for curve in curves])
                     for i, n in enumerate(levels) for key in keys}
    metrics["tune_wall_s"] = [round(t["wall_s"], 3) for t in tune]
    metrics["tune_all_reported_s"] = [round(t["all_reported_s"], 3) for t in tune]
    whole = next(p for p in packing if p["fraction"] == 1.0)
    for p in packing:
        metrics[f"packing_most_running_at_{p['fraction']}"] = p["most_running"]
        metrics[f"packing_runs_per_s_at_{p['fraction']}"] = p["runs_per_s"]
        metrics[f"packing_throughput_vs_whole_at_{p['fraction']}"] = round(p["runs_per_s"] / whole["runs_per_s"], 3)
    params = {"levels": levels, "packing_fractions": list(fractions), "rounds": rounds, "window_s": window_s, "num_cpus": NUM_CPUS, "report_s": REPORT_S,
              "nodes": NODES, "node_cpus": NODE_CPUS, "curves": curves, "tune": tune, "packing": packing,
              "packing_batch": packing_batch}
    return harness.result("concurrency", params, metrics, ratios, TARGETS, per_round=per_round,
                          sides={"paddleray_runs": sum(levels) * rounds, "tune_trials": sum(t["trials"] for t in tune)})
