"""A stock v2 client (tritonclient[grpc], from the package index) against both v2 endpoints (Serve's
proxy, and the model's own), with no extra metadata: unary calls, metadata, errors and the
streaming API."""

from __future__ import annotations

import asyncio
import json
import subprocess

import numpy as np
import pytest

from paddleray.services.exporter.serving.spec import ServedModel, ServedVersion
from paddleray.services.localstack.ports import free_port
from support.serving import dynamic_forward
from support.triton import CLIENT_SCRIPT, triton_python


@pytest.fixture(scope="module")
def served(controller, artifacts):
    model = ServedModel("mlp", [ServedVersion("1", str(artifacts["mlp1"][0]), num_cpus=0.1)], direct_port=free_port())
    asyncio.run(controller.apply([model]))
    return model


@pytest.mark.parametrize("path", ["proxy", "direct"])
def test_tritonclient_works_unchanged(controller, served, artifacts, tmp_path, path):
    port = controller.grpc_port if path == "proxy" else served.direct_port
    python = triton_python()
    x = np.random.default_rng(3).standard_normal((3, 64)).astype(np.float32)
    case = tmp_path / "case.json"
    case.write_text(json.dumps({"x": x.tolist()}))
    run = subprocess.run(
        [python, str(CLIENT_SCRIPT), f"127.0.0.1:{port}", str(case)],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    expected = dynamic_forward(artifacts["mlp1"][1], x)[0]
    assert result["live"] and result["ready"] and result["model_ready"] and result["server_name"] == "paddleray"
    assert result["metadata"]["inputs"] == [{"name": "x", "datatype": "FP32", "shape": ["-1", "64"]}]
    np.testing.assert_allclose(np.asarray(result["infer"], np.float32), expected, rtol=1e-5, atol=1e-5)
    assert result["infer_id"] == "t1"
    assert result["unknown_model"] == "StatusCode.NOT_FOUND"
    assert result["bad_shape"][0] == "StatusCode.INVALID_ARGUMENT" and "inputs[x].shape" in result["bad_shape"][1]
    assert result["stream_errors"] == [] and result["stream_ids"] == [f"s{i}" for i in range(20)]
    np.testing.assert_allclose(np.asarray(result["stream_first"], np.float32), expected, rtol=1e-5, atol=1e-5)
