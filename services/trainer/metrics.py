"""Prometheus metrics of the trainer (served on the service's /metrics endpoint)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RUNS_BY_STATE = Gauge("paddleray_trainer_runs", "Runs known to the trainer, by state.", ["state"])
SAMPLES_PER_SECOND = Gauge(
    "paddleray_trainer_samples_per_second",
    "Throughput rank 0 last reported (metric 'samples_per_s'), by active run.",
    ["run"],
)
STEP_SECONDS = Histogram(
    "paddleray_trainer_step_seconds",
    "Time between consecutive reports of rank 0 (one report per step or epoch).",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
ACTOR_STARTS = Counter("paddleray_trainer_actor_starts_total", "Worker actors started.")
POOL_REQUESTS = Counter(
    "paddleray_trainer_pool_requests_total", "Worker groups asked of the warm pool, by result.", ["result"]
)
POOL_IDLE_GROUPS = Gauge("paddleray_trainer_pool_idle_groups", "Warm worker groups waiting for a run.")
TIME_TO_FIRST_LINE = Histogram(
    "paddleray_trainer_start_seconds",
    "StartRun to user code started on every rank, by whether the group came warm from the pool.",
    ["warm"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
)
