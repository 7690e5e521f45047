"""The v2 REST shell over a real data plane (real exported model, no Ray, no HTTP server): the
same routing and errors as gRPC, JSON and binary tensors, bounded echoes."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from paddleray.services.exporter.serving.artifact import load_artifact
from paddleray.services.exporter.serving.replica.dataplane import DataPlane, RoutedModel, RoutedVersion
from paddleray.services.exporter.serving.replica.predictor import load_predictor
from paddleray.services.exporter.serving.replica.v2_rest import HEADER_LENGTH, handle
from paddleray.services.exporter.serving.spec import PredictorOptions
from support.serving import dynamic_forward


@pytest.fixture
def plane(mlp_artifact):
    artifact = load_artifact(mlp_artifact[0])
    predictor = load_predictor(artifact, "paddle", PredictorOptions())

    async def run(inputs):
        return predictor.predict(inputs)

    p = DataPlane(rng=random.Random(0))
    p.swap({"mlp": RoutedModel("mlp", {"1": RoutedVersion("1", 1.0, artifact.signature, "paddle_inference", run),
                                       "2": RoutedVersion("2", 0.0, artifact.signature, "paddle_inference", run)})})
    return p


async def _json(plane, method, path, document=None, headers=None):
    body = json.dumps(document).encode() if document is not None else b""
    answer = await handle(plane, method, path, headers or {}, body)
    return answer.status, json.loads(answer.body)


async def test_server_and_model_resources(plane):
    assert await _json(plane, "GET", "/v2/health/live") == (200, {"live": True})
    assert await _json(plane, "GET", "/v2/health/ready") == (200, {"ready": True})
    status, meta = await _json(plane, "GET", "/v2/models/mlp/versions/2")
    assert status == 200 and meta["versions"] == ["1", "2"] and meta["platform"] == "paddle_inference"
    assert (await _json(plane, "GET", "/v2/models/mlp/ready"))[0] == 200
    assert (await _json(plane, "POST", "/v2/models/mlp/ready"))[0] == 501
    assert (await _json(plane, "GET", "/v2/whatever"))[0] == 404


async def test_infer_json_nested_or_flat_and_binary(plane, mlp_artifact):
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    expected = dynamic_forward(mlp_artifact[1], x)[0]
    for data in (x.tolist(), x.ravel().tolist()):
        status, answer = await _json(plane, "POST", "/v2/models/mlp/infer",
                                     {"id": "q", "inputs": [{"name": "x", "shape": [2, 64], "datatype": "FP32", "data": data}]})
        assert status == 200 and answer["id"] == "q" and answer["model_version"] == "1"
        np.testing.assert_allclose(np.asarray(answer["outputs"][0]["data"]).reshape(2, 10), expected, rtol=1e-5, atol=1e-5)
    header = json.dumps({"inputs": [{"name": "x", "shape": [2, 64], "datatype": "FP32",
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "parameters": {"binary_data_output": True}}).encode()
    answer = await handle(plane, "POST", "/v2/models/mlp/versions/2/infer", {HEADER_LENGTH: str(len(header))},
                          header + x.tobytes())
    length = int(answer.headers[HEADER_LENGTH])
    meta = json.loads(answer.body[:length])
    assert answer.status == 200 and meta["model_version"] == "2"
    np.testing.assert_allclose(np.frombuffer(answer.body[length:], "<f4").reshape(2, 10), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("document", "status", "words"), [
    ({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}, 400, "inputs[x].shape"),
    ({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32", "data": [1]}]}, 400, "inputs[0].data"),
    ({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32", "data": ["a"] * 64}]}, 400, "inputs[0].data"),
    ({"inputs": [{"name": "x", "shape": "1,64", "datatype": "FP32", "data": []}]}, 400, "inputs[0].shape"),
    ({"inputs": {}}, 400, "inputs"),
    ([1, 2], 400, "body"),
])
async def test_bad_bodies_name_the_field(plane, document, status, words):
    got, answer = await _json(plane, "POST", "/v2/models/mlp/infer", document)
    assert got == status and words in answer["error"]


async def test_not_found_names_only_what_was_asked_and_is_bounded(plane):
    status, answer = await _json(plane, "POST", "/v2/models/nope/infer", {"inputs": []})
    assert status == 404 and "'nope'" in answer["error"] and "mlp" not in answer["error"]
    status, answer = await _json(plane, "GET", f"/v2/models/mlp/versions/{'9' * 100_000}")
    assert status == 404 and len(answer["error"]) < 200 and "'1'" not in answer["error"]
    bad = {"inputs": [{"name": "i" * 100_000, "shape": [1, 64], "datatype": "FP32", "data": [0] * 64}]}
    status, answer = await _json(plane, "POST", "/v2/models/mlp/infer", bad)
    assert status == 400 and len(answer["error"]) < 500
