"""Dynamic batching in the replica: concurrent requests of different sizes, stacked into shared
predictor calls, each get exactly their own rows back; autoscaling accepted. That batches
formed at all is read from the replicas' own batch-size histogram on the Ray node's metrics
endpoint: every row went through a predictor call, in fewer calls than there were requests."""

from __future__ import annotations

import asyncio
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from paddleray.services.exporter.serving.replica import codec
from paddleray.services.exporter.serving.spec import Autoscaling, Batching, ServedModel, ServedVersion
from paddleray.services.localstack.ports import wait_until
from support.serving import application_channel, dynamic_forward, v2_stub

# A name of its own: the shared Ray node's endpoint keeps the series of other tests' replicas.
NAME = "batched-mlp"


def test_batched_requests_get_their_own_rows_in_shared_predictor_calls(controller, artifacts):
    model = ServedModel(NAME, [ServedVersion("1", str(artifacts["mlp1"][0]))], num_cpus=0.1,
                        batching=Batching(16, 0.02), autoscaling=Autoscaling(1, 2, 4))
    asyncio.run(controller.apply([model]))
    rng = np.random.default_rng(7)
    cases = [rng.standard_normal((int(rng.integers(1, 4)), 64)).astype(np.float32) for _ in range(96)]
    reference = artifacts["mlp1"][1]
    with application_channel(f"127.0.0.1:{controller.grpc_port}", NAME) as channel:
        stub = v2_stub(channel)

        def call(x):
            return codec.decode_response(stub.ModelInfer(codec.encode_request(NAME, {"x": x}), timeout=60))["fetch_name_0"]

        with ThreadPoolExecutor(16) as pool:
            outputs = list(pool.map(call, cases))
    for x, out in zip(cases, outputs, strict=True):
        np.testing.assert_allclose(out, dynamic_forward(reference, x)[0], rtol=1e-5, atol=1e-5)
    status = asyncio.run(controller.status())[NAME].versions["1"]
    assert status.state == "READY" and 1 <= status.running_replicas <= 2
    rows = sum(len(x) for x in cases)
    # Replicas hand their tallies to Ray once a second, and Ray's agent exports them some seconds later.
    calls, batched_rows, single_row_calls = wait_until(lambda: _batch_sizes(rows), timeout=90, interval=1,
                                                       message=f"{rows} rows in the batch-size histogram")
    assert batched_rows == rows
    assert calls < len(cases), f"{calls} predictor calls for {len(cases)} concurrent requests: no batch formed"
    assert single_row_calls < calls  # some calls held more than one row


def _batch_sizes(rows: int) -> tuple[float, float, float] | None:
    """(predictor calls, rows, calls of one row) of NAME's replicas, once all the rows are counted."""
    import ray

    # Every node's agent: the replicas may be on any node of the cluster.
    endpoints = {(node["NodeManagerAddress"], node["MetricsExportPort"]) for node in ray.nodes() if node["Alive"]}
    text = "".join(urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode()
                   for host, port in endpoints)
    totals = {"_count": 0.0, "_sum": 0.0, "_bucket": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "paddleray_inference_batch_size" not in sample.name or sample.labels.get("model") != NAME:
                continue
            suffix = sample.name.rsplit("batch_size", 1)[1]
            if suffix in ("_count", "_sum") or (suffix == "_bucket" and sample.labels.get("le") == "1.0"):
                totals[suffix] += sample.value  # summed over the replicas
    return (totals["_count"], totals["_sum"], totals["_bucket"]) if totals["_sum"] >= rows else None
