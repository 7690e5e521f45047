"""Stock v2 clients (tritonclient[grpc,http], from the package index) against the endpoints a
deployment shows: gRPC with the model's `application` metadata (unary calls, metadata, errors, the
streaming API), gRPC with no metadata at all (routed by the model the request names:
serving/haproxy_routes.py; the server app is deployed beside the model, so Serve alone would
refuse these) and REST with nothing extra (JSON and binary tensors)."""

from __future__ import annotations

import asyncio
import json
import subprocess

import numpy as np
import pytest

from paddleray.services.exporter.serving.spec import ServedModel, ServedVersion
from support.serving import dynamic_forward
from support.triton import CLIENT_SCRIPT, triton_python


@pytest.fixture(scope="module")
def served(controller, artifacts):
    model = ServedModel("mlp", [ServedVersion("1", str(artifacts["mlp1"][0]))], num_cpus=0.1)
    asyncio.run(controller.apply([model]))
    return model


def test_tritonclient_works_unchanged(controller, served, artifacts, tmp_path):
    python = triton_python()
    x = np.random.default_rng(3).standard_normal((3, 64)).astype(np.float32)
    case = tmp_path / "case.json"
    case.write_text(json.dumps({"x": x.tolist()}))
    run = subprocess.run(
        [python, str(CLIENT_SCRIPT), f"127.0.0.1:{controller.grpc_port}", f"127.0.0.1:{controller.http_port}", str(case)],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    expected = dynamic_forward(artifacts["mlp1"][1], x)[0]
    grpc_side, http_side, bare = result["grpc"], result["http"], result["bare"]
    for side in (grpc_side, http_side, bare):
        assert side["live"] and side["ready"] and side["model_ready"] and side["server_name"] == "paddleray"
    assert grpc_side["metadata"]["inputs"] == [{"name": "x", "datatype": "FP32", "shape": ["-1", "64"]}]
    assert http_side["metadata"]["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 64]}]
    for side in (grpc_side, bare):
        np.testing.assert_allclose(np.asarray(side["infer"], np.float32), expected, rtol=1e-5, atol=1e-5)
    assert bare["metadata"] == grpc_side["metadata"]
    assert bare["unknown_model"][0] == "StatusCode.NOT_FOUND" and "'nope' is not served" in bare["unknown_model"][1]
    for binary in (True, False):
        np.testing.assert_allclose(np.asarray(http_side[f"infer_binary_{binary}"], np.float32), expected,
                                   rtol=1e-5, atol=1e-5)
    assert grpc_side["infer_id"] == "t1" and http_side["infer_id"] == "h1"
    assert grpc_side["unknown_model"] == "StatusCode.NOT_FOUND"
    assert http_side["unknown_model"][0] == "404" and "'nope'" in http_side["unknown_model"][1]
    assert grpc_side["bad_shape"][0] == "StatusCode.INVALID_ARGUMENT" and "inputs[x].shape" in grpc_side["bad_shape"][1]
    assert grpc_side["stream_errors"] == [] and grpc_side["stream_ids"] == [f"s{i}" for i in range(20)]
    np.testing.assert_allclose(np.asarray(grpc_side["stream_first"], np.float32), expected, rtol=1e-5, atol=1e-5)
