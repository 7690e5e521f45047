"""The demo's query step (`query` in services/cli/demo_serving.py) through the SDK's v2 client against
real Ray Serve: accuracy on the held-out digits, latencies, one batched call agreeing with the
single-row calls. The deployment resource is built here as GetDeployment would return it."""

from __future__ import annotations

import asyncio
import io
import math

import numpy as np
from rich.console import Console

from paddleray.exporter.v1 import deployment_pb2, model_pb2
from paddleray.services.cli import demo_serving
from paddleray.services.client import Client, ConnectionConfig
from paddleray.services.exporter.serving.spec import ServedModel, ServedVersion
from support.serving import dynamic_forward


def test_the_demo_query_reports_the_served_models_accuracy_and_latencies(controller, artifacts):
    artifact_dir, model = artifacts["mlp1"]
    asyncio.run(controller.apply([ServedModel("demo-digits", [ServedVersion("1", str(artifact_dir))], num_cpus=0.1)]))
    deployment = deployment_pb2.Deployment(name="deployments/demo-digits", serving_name="demo-digits",
                                           endpoint=f"127.0.0.1:{controller.grpc_port}")
    version = model_pb2.ModelVersion(name="models/m/versions/1",
                                     inputs=[model_pb2.TensorSpec(name="x", shape=[-1, 64],
                                                                  datatype=model_pb2.DATA_TYPE_FP32)])
    features, labels = demo_serving.held_out({"epochs": 1})
    features, labels = features[:40], labels[:40]
    out = io.StringIO()
    # The scheduler address is never dialled by the query step (channels connect lazily).
    with Client(ConnectionConfig(address="127.0.0.1:1")) as client:
        result = demo_serving.query(client, Console(file=out, width=200), deployment, version, features, labels)

    expected = np.argmax(dynamic_forward(model, features.astype(np.float32))[0], axis=1)
    assert result["rows"] == 40 and result["correct"] == int(np.sum(expected == labels))
    assert result["accuracy"] == result["correct"] / 40
    assert result["batch_call"]["agrees_with_single_rows"]
    latency = result["latency_ms"]
    assert all(math.isfinite(latency[k]) and latency[k] > 0 for k in ("p50", "p99", "mean", "cold_first_request"))
    assert latency["p50"] <= latency["p99"]
    assert f"accuracy {result['accuracy']:.4f}" in out.getvalue() and "p99" in out.getvalue()
