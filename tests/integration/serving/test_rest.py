"""The v2 REST API on the same replicas as gRPC, with a stock HTTP client (urllib): health, metadata,
JSON and binary tensors, version routing in the path, errors as HTTP statuses with a JSON body."""

from __future__ import annotations

import asyncio
import json
import struct
import urllib.error
import urllib.request

import numpy as np
import pytest

from paddleray.services.exporter.serving.spec import ServedModel, ServedVersion
from support.serving import dynamic_forward


@pytest.fixture(scope="module")
def base(controller, artifacts):
    asyncio.run(controller.apply([
        ServedModel("mlp", [ServedVersion("1", str(artifacts["mlp1"][0]), weight=1.0),
                            ServedVersion("2", str(artifacts["mlp2"][0]), weight=0.0)], num_cpus=0.1),
    ]))
    return f"http://127.0.0.1:{controller.http_port}"


def _call(url: str, body: bytes | None = None, headers: dict | None = None) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, body, headers or ({"Content-Type": "application/json"} if body else {}))
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def _json(url: str, document=None) -> tuple[int, dict]:
    status, _, body = _call(url, json.dumps(document).encode() if document is not None else None)
    return status, json.loads(body)


def test_health_and_metadata(base):
    assert _json(f"{base}/v2/health/live") == (200, {"live": True})
    assert _json(f"{base}/v2/health/ready") == (200, {"ready": True})
    assert _json(f"{base}/v2")[1]["name"] == "paddleray"
    status, meta = _json(f"{base}/v2/models/mlp")
    assert status == 200 and meta["versions"] == ["1", "2"]
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 64]}]
    assert _json(f"{base}/v2/models/mlp/ready") == (200, {"name": "mlp", "ready": True})
    assert _json(f"{base}/v2/models/mlp/versions/2/ready")[0] == 200


def test_json_infer_by_weight_and_by_version(base, artifacts):
    x = np.random.default_rng(2).standard_normal((3, 64)).astype(np.float32)
    request = {"id": "r1", "inputs": [{"name": "x", "shape": [3, 64], "datatype": "FP32", "data": x.tolist()}]}
    for path, version, reference in (("", "1", "mlp1"), ("/versions/2", "2", "mlp2")):
        status, answer = _json(f"{base}/v2/models/mlp{path}/infer", request)
        assert status == 200 and answer["model_version"] == version and answer["id"] == "r1"
        [out] = answer["outputs"]
        assert out["name"] == "fetch_name_0" and out["shape"] == [3, 10] and out["datatype"] == "FP32"
        np.testing.assert_allclose(np.asarray(out["data"], np.float32).reshape(3, 10),
                                   dynamic_forward(artifacts[reference][1], x)[0], rtol=1e-5, atol=1e-5)


def test_binary_tensor_extension(base, artifacts):
    x = np.random.default_rng(3).standard_normal((2, 64)).astype(np.float32)
    header = json.dumps({"inputs": [{"name": "x", "shape": [2, 64], "datatype": "FP32",
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "outputs": [{"name": "fetch_name_0", "parameters": {"binary_data": True}}]}).encode()
    status, headers, body = _call(f"{base}/v2/models/mlp/infer", header + x.tobytes(), {
        "Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(header))})
    assert status == 200, body
    length = int({k.lower(): v for k, v in headers.items()}["inference-header-content-length"])
    answer = json.loads(body[:length])
    [out] = answer["outputs"]
    assert out["parameters"]["binary_data_size"] == 2 * 10 * 4
    values = np.asarray(struct.unpack("<20f", body[length:]), np.float32).reshape(2, 10)
    np.testing.assert_allclose(values, dynamic_forward(artifacts["mlp1"][1], x)[0], rtol=1e-5, atol=1e-5)


def test_errors_are_http_statuses_naming_the_field(base):
    status, answer = _json(f"{base}/v2/models/mlp/infer",
                           {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]})
    assert status == 400 and "inputs[x].shape" in answer["error"]
    status, answer = _json(f"{base}/v2/models/mlp/infer",
                           {"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32", "data": [1, 2]}]})
    assert status == 400 and "inputs[0].data" in answer["error"]
    status, _, body = _call(f"{base}/v2/models/mlp/infer", b"{not json", {"Content-Type": "application/json"})
    assert status == 400 and "not JSON" in json.loads(body)["error"]
    status, answer = _json(f"{base}/v2/models/mlp/versions/9/infer", {"inputs": []})
    assert status == 404 and "'9'" in answer["error"]
    # A model nobody serves reaches the server app, which names only what was asked for.
    status, answer = _json(f"{base}/v2/models/nope/infer", {"inputs": []})
    assert status == 404 and "'nope'" in answer["error"] and "mlp" not in answer["error"]
    status, answer = _json(f"{base}/v2/models/{'n' * 5000}/ready")
    assert status == 404 and len(answer["error"]) < 300
