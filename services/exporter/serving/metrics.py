"""Prometheus metrics of the serving layer, per model and version.

Recorded with Ray's metrics API (ray.serve.metrics) inside the Serve replicas, so Ray's
per-node metrics agent exports them: on the agent's port
(`ray start --metrics-export-port`) every name gets Ray's `ray_` prefix, e.g.
`ray_paddleray_inference_requests_total`. The Prometheus scrape job of the Ray nodes strips
that prefix for our names (metric_relabel_configs in services/exporter/serving/README.md), so dashboards see:

    paddleray_inference_requests_total{model,version,code}
    paddleray_inference_latency_seconds{model,version}   (histogram)
    paddleray_inference_batch_size{model,version}        (histogram)
    paddleray_serving_replicas{model,version}            (gauge: 1 per live replica, so
                                                          sum by (model, version) counts them)
"""

from __future__ import annotations

from functools import cache

REQUESTS = "paddleray_inference_requests"  # a Counter: the exporter adds "_total"
LATENCY = "paddleray_inference_latency_seconds"
BATCH_SIZE = "paddleray_inference_batch_size"
REPLICAS = "paddleray_serving_replicas"
LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0]
BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
_TAGS = ("model", "version")


@cache
def _requests():
    from ray.serve.metrics import Counter

    return Counter(REQUESTS, "v2 inference calls answered, by model, version and status code.", (*_TAGS, "code"))


@cache
def _latency():
    from ray.serve.metrics import Histogram

    return Histogram(LATENCY, "Time the ingress took to answer ModelInfer.", LATENCY_BUCKETS, _TAGS)


@cache
def _batch_size():
    from ray.serve.metrics import Histogram

    return Histogram(BATCH_SIZE, "Rows per predictor call (after dynamic batching).", BATCH_BUCKETS, _TAGS)


@cache
def _replicas():
    from ray.serve.metrics import Gauge

    return Gauge(REPLICAS, "1 per running replica of a served model version (sum to count them).", _TAGS)


def record_request(model: str, version: str, code: str, seconds: float) -> None:
    _requests().inc(1, {"model": model, "version": version, "code": code})
    _latency().observe(seconds, {"model": model, "version": version})


def replica_up(model: str, version: str) -> None:
    """Called once by each model replica when it is ready; its series goes when the replica does."""
    _replicas().set(1, {"model": model, "version": version})


class _BatchSize:
    def __init__(self, model: str, version: str) -> None:
        self._tags = {"model": model, "version": version}

    def observe(self, rows: int) -> None:
        _batch_size().observe(rows, self._tags)


def batch_size_histogram(model: str, version: str) -> _BatchSize:
    return _BatchSize(model, version)
