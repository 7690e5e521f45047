"""Per-request metrics are tallies in the replica, handed to Ray's metrics API once per flush:
exact counts, cumulative histogram buckets, and nothing recorded per request."""

from __future__ import annotations

from paddleray.services.exporter.serving.replica import metrics


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def inc(self, value, tags):
        self.calls.append(("inc", value, tuple(sorted(tags.items()))))

    def set(self, value, tags):
        self.calls.append(("set", value, tuple(sorted(tags.items()))))


def test_a_flush_hands_over_the_deltas_and_the_cumulative_buckets(monkeypatch):
    recorder = Recorder()
    fake = {"requests": recorder, "latency": (recorder, recorder, recorder),
            "batch_size": (recorder, recorder, recorder), "replicas": recorder}
    monkeypatch.setattr(metrics, "_ray_metrics", lambda: fake)
    m = metrics.ServingMetrics()
    for seconds in (0.0004, 0.002, 0.002, 30.0):
        m.request("mlp", "1", "OK", seconds)
    m.request("mlp", "", "NOT_FOUND", 0.0001)
    m.serving("mlp", ["1"])
    assert recorder.calls == []  # nothing is recorded per request
    m.flush()
    incs = {c[2]: c[1] for c in recorder.calls if c[0] == "inc"}
    assert incs[(("code", "OK"), ("model", "mlp"), ("version", "1"))] == 4
    assert incs[(("code", "NOT_FOUND"), ("model", "mlp"), ("version", ""))] == 1
    buckets = {dict(c[2]).get("le"): c[1] for c in recorder.calls
               if c[0] == "set" and dict(c[2]).get("version") == "1" and "le" in dict(c[2])}
    assert buckets["0.0005"] == 1 and buckets["0.0025"] == 3 and buckets["10.0"] == 3 and buckets["+Inf"] == 4
    recorder.calls.clear()
    m.request("mlp", "1", "OK", 0.002)
    m.flush()
    incs = [c for c in recorder.calls if c[0] == "inc"]
    assert [c[1] for c in incs] == [1]  # a delta, not the total
    buckets = {dict(c[2])["le"]: c[1] for c in recorder.calls if c[0] == "set" and "le" in dict(c[2])}
    assert buckets["+Inf"] == 5  # cumulative since the replica started
    replicas = [c for c in recorder.calls if c[0] == "set" and "le" not in dict(c[2]) and c[1] in (0, 1)]
    assert not replicas  # unchanged: not set again
