"""Prometheus metrics of the scheduler (served by the common /metrics endpoint)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

JOBS_BY_STATE = Gauge("paddleray_scheduler_jobs", "Jobs stored, by state.", ["state"])
QUEUE_DEPTH = Gauge("paddleray_scheduler_queue_depth", "Jobs waiting for dispatch.")
PARKED = Gauge("paddleray_scheduler_parked_jobs", "Queued jobs the cluster cannot hold even when empty, set aside.")
TIME_IN_QUEUE = Histogram(
    "paddleray_scheduler_time_in_queue_seconds", "From CreateJob (or end of a retry's backoff) to dispatch.",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)
DISPATCH_LATENCY = Histogram(
    "paddleray_scheduler_dispatch_seconds", "From claiming a job to the trainer accepting its run.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
RETRIES = Counter("paddleray_scheduler_retries_total", "Failed attempts that were retried.")
TIMEOUTS = Counter("paddleray_scheduler_timeouts_total", "Jobs that ended TIMED_OUT.")
TAKEOVERS = Counter("paddleray_scheduler_lease_takeovers_total", "Jobs taken over from a replica that stopped renewing.")
