"""Runs in: a Serve replica.

Prometheus metrics of the serving layer, per model and version: counted cheaply per request,
handed to Ray's metrics API once a second.

A request only adds to in-process tallies (a dict and a bucket index: about 0.6 us); the
replica's flusher (`ServingMetrics.flush`, every `FLUSH_INTERVAL_S`) hands the deltas to Ray's
metrics API, whose per-call cost (3-5 us a call here, three calls a request) was a third of the
serving path's Python time when it was called per request. Ray's API has no "observe N times"
for a histogram, so the histograms are exported as their cumulative series, exactly as
Prometheus stores a histogram: gauges `<name>_bucket{le}`, `<name>_sum`, `<name>_count` of the
replica's totals since it started (a restarted replica starts from zero, which rate() reads as
a counter reset). Ray's per-node metrics agent (`ray start --metrics-export-port`) exports them
with its `ray_` prefix; the scrape job of the Ray nodes strips it for our names
(metric_relabel_configs in services/exporter/serving/README.md), so dashboards see:

    paddleray_inference_requests_total{model,version,code}
    paddleray_inference_latency_seconds_bucket{model,version,le} (+ _sum, _count)
    paddleray_inference_batch_size_bucket{model,version,le}      (+ _sum, _count)
    paddleray_serving_replicas{model,version}   (1 per live replica: sum by (model, version))
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from functools import cache

REQUESTS = "paddleray_inference_requests"  # a Counter: the exporter adds "_total"
LATENCY = "paddleray_inference_latency_seconds"
BATCH_SIZE = "paddleray_inference_batch_size"
REPLICAS = "paddleray_serving_replicas"
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
FLUSH_INTERVAL_S = 1.0
_TAGS = ("model", "version")


class _Histogram:
    """Cumulative bucket counts, sum and count per (model, version), as Prometheus keeps them."""

    def __init__(self, name: str, description: str, bounds: tuple[float, ...]) -> None:
        self.name, self.description, self.bounds = name, description, bounds
        self.labels = [_le(b) for b in bounds] + ["+Inf"]
        # (model, version) -> [count per bucket (not cumulative; the last is +Inf), sum]
        self.totals: dict[tuple[str, str], list] = {}
        self.changed: set[tuple[str, str]] = set()

    def observe(self, key: tuple[str, str], value: float) -> None:
        entry = self.totals.get(key)
        if entry is None:
            entry = self.totals[key] = [[0] * (len(self.bounds) + 1), 0.0]
        entry[0][bisect.bisect_left(self.bounds, value)] += 1
        entry[1] += value
        self.changed.add(key)

    def export(self, gauges) -> None:
        buckets, sums, counts = gauges
        for key in self.changed:
            per_bucket, total = self.totals[key]
            tags = {"model": key[0], "version": key[1]}
            cumulative = 0
            for label, n in zip(self.labels, per_bucket, strict=True):
                cumulative += n
                buckets.set(cumulative, {**tags, "le": label})
            sums.set(total, tags)
            counts.set(cumulative, tags)
        self.changed.clear()


def _le(bound: float) -> str:
    return repr(float(bound))  # as prometheus_client writes them: "0.0005", "1.0"


class ServingMetrics:
    """One per replica process: `request` and `batch` per call, `flush` from the replica's loop."""

    def __init__(self) -> None:
        self._requests: Counter[tuple[str, str, str]] = Counter()
        self.latency = _Histogram(LATENCY, "Time the replica took to answer ModelInfer.", LATENCY_BUCKETS)
        self.batch_size = _Histogram(BATCH_SIZE, "Rows per predictor call (after dynamic batching).", BATCH_BUCKETS)
        self._replicas: dict[tuple[str, str], int] = {}
        self._replicas_changed = False

    def request(self, model: str, version: str, code: str, seconds: float) -> None:
        """Every v2 inference call answered (unknown model or version: '')."""
        self._requests[model, version, code] += 1
        if math.isfinite(seconds):
            self.latency.observe((model, version), seconds)

    def batch(self, model: str, version: str, rows: int) -> None:
        self.batch_size.observe((model, version), rows)

    def serving(self, model: str, versions: list[str]) -> None:
        """The versions this replica serves now (1 each; the others' series go to 0)."""
        now = {(model, v): 1 for v in versions}
        self._replicas = {**dict.fromkeys(self._replicas, 0), **now}
        self._replicas_changed = True

    def flush(self) -> None:
        """Hands what changed since the last flush to Ray's metrics API (in a Serve replica or
        any Ray worker or driver)."""
        requests, self._requests = self._requests, Counter()
        counter = _ray_metrics()["requests"]
        for (model, version, code), n in requests.items():
            counter.inc(n, {"model": model, "version": version, "code": code})
        self.latency.export(_ray_metrics()["latency"])
        self.batch_size.export(_ray_metrics()["batch_size"])
        if self._replicas_changed:
            gauge = _ray_metrics()["replicas"]
            for (model, version), value in self._replicas.items():
                gauge.set(value, {"model": model, "version": version})
            self._replicas = {k: v for k, v in self._replicas.items() if v}
            self._replicas_changed = False


@cache
def _ray_metrics() -> dict:
    # Serve's metrics add the deployment, replica and application tags of the replica they run in.
    from ray.serve.metrics import Counter as RayCounter
    from ray.serve.metrics import Gauge

    def histogram(name: str, description: str):
        return (Gauge(f"{name}_bucket", f"{description} Cumulative count per bucket.", (*_TAGS, "le")),
                Gauge(f"{name}_sum", f"{description} Sum.", _TAGS),
                Gauge(f"{name}_count", f"{description} Count.", _TAGS))

    return {
        "requests": RayCounter(REQUESTS, "v2 inference calls answered, by model, version and status code.", (*_TAGS, "code")),
        "latency": histogram(LATENCY, "Time the replica took to answer ModelInfer."),
        "batch_size": histogram(BATCH_SIZE, "Rows per predictor call (after dynamic batching)."),
        "replicas": Gauge(REPLICAS, "1 per running replica serving a model version (sum to count them).", _TAGS),
    }
