"""The v2 data plane end to end in-process: real exported models, real predictors, no Ray."""

from __future__ import annotations

import asyncio
import random

import grpc
import numpy as np
import pytest

from paddleray.inference.v2 import grpc_service_pb2 as pb
from paddleray.services.common.errors import DomainError, InvalidArgument, NotFound
from paddleray.services.exporter.serving.artifact import load_artifact
from paddleray.services.exporter.serving.replica import codec
from paddleray.services.exporter.serving.replica.dataplane import DataPlane, RoutedModel, RoutedVersion
from paddleray.services.exporter.serving.replica.predictor import load_predictor
from paddleray.services.exporter.serving.spec import PredictorOptions
from support.serving import dynamic_forward


def _local(directory, version="1", weight=1.0):
    artifact = load_artifact(directory)
    predictor = load_predictor(artifact, "paddle", PredictorOptions())

    async def run(inputs):
        return predictor.predict(inputs)

    return RoutedVersion(version, weight, artifact.signature, "paddle_inference", run)


@pytest.fixture
def plane(mlp_artifact, two_artifact):
    p = DataPlane(timeout_s=2.0, rng=random.Random(0))
    p.swap({
        "mlp": RoutedModel("mlp", {"1": _local(mlp_artifact[0], "1", 0.9), "2": _local(mlp_artifact[0], "2", 0.1)}),
        "two": RoutedModel("two", {"3": _local(two_artifact[0], "3")}),
    })
    return p


async def test_infer_matches_the_dynamic_model_for_both_encodings(plane, mlp_artifact):
    x = np.random.default_rng(1).standard_normal((5, 64)).astype(np.float32)
    for raw in (True, False):
        response = await plane.model_infer(codec.encode_request("mlp", {"x": x}, version="1", raw=raw, request_id="r1"))
        assert response.id == "r1" and response.model_version == "1"
        out = codec.decode_response(response)["fetch_name_0"]
        np.testing.assert_allclose(out, dynamic_forward(mlp_artifact[1], x)[0], rtol=1e-5, atol=1e-5)


async def test_several_inputs_outputs_and_output_selection(plane, two_artifact):
    x, n = np.ones((2, 4), np.float32), np.array([[5], [6]], np.int64)
    request = codec.encode_request("two", {"x": x, "n": n})
    outputs = codec.decode_response(await plane.model_infer(request))
    assert list(outputs) == ["y", "m"] and np.array_equal(outputs["m"], n * 2)
    request.outputs.add(name="m")
    only = await plane.model_infer(request)
    assert [t.name for t in only.outputs] == ["m"] and only.outputs[0].datatype == "INT64"


async def test_weighted_traffic_and_pinned_versions(plane):
    x = np.zeros((1, 64), np.float32)
    seen = [(await plane.model_infer(codec.encode_request("mlp", {"x": x}))).model_version for _ in range(400)]
    assert 0.84 < seen.count("1") / 400 < 0.96
    pinned = {(await plane.model_infer(codec.encode_request("mlp", {"x": x}, version="2"))).model_version for _ in range(20)}
    assert pinned == {"2"}


async def test_not_found_for_unknown_model_or_version(plane):
    x = np.zeros((1, 64), np.float32)
    with pytest.raises(NotFound, match="'nope' is not served"):
        await plane.model_infer(codec.encode_request("nope", {"x": x}))
    with pytest.raises(NotFound, match="no version '9'"):
        await plane.model_infer(codec.encode_request("mlp", {"x": x}, version="9"))
    with pytest.raises(NotFound):
        plane.model_ready(pb.ModelReadyRequest(name="mlp", version="9"))
    with pytest.raises(NotFound):
        plane.model_metadata(pb.ModelMetadataRequest(name="nope"))


async def test_bad_input_is_invalid_argument(plane):
    with pytest.raises(InvalidArgument) as info:
        await plane.model_infer(codec.encode_request("mlp", {"x": np.zeros((1, 63), np.float32)}))
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT and "inputs[x].shape" in info.value.message


async def test_metadata_and_readiness(plane):
    assert plane.server_live(pb.ServerLiveRequest()).live and plane.server_ready(pb.ServerReadyRequest()).ready
    meta = plane.model_metadata(pb.ModelMetadataRequest(name="two"))
    assert meta.versions == ["3"] and meta.platform == "paddle_inference"
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [("x", "FP32", [-1, 4]), ("n", "INT64", [-1, 1])]
    assert plane.model_metadata(pb.ModelMetadataRequest(name="mlp")).versions == ["1", "2"]
    assert plane.model_ready(pb.ModelReadyRequest(name="mlp")).ready
    assert not DataPlane().server_ready(pb.ServerReadyRequest()).ready


async def test_a_raising_predictor_is_a_short_internal_error_and_a_hang_a_deadline(mlp_artifact):
    artifact = load_artifact(mlp_artifact[0])

    async def boom(inputs):
        raise ValueError("shape mismatch deep inside\nTraceback (most recent call last): ...")

    async def hang(inputs):
        await asyncio.sleep(60)

    plane = DataPlane(timeout_s=0.2)
    plane.swap({"m": RoutedModel("m", {
        "1": RoutedVersion("1", 1, artifact.signature, "p", boom), "2": RoutedVersion("2", 0, artifact.signature, "p", hang)
    })})
    request = codec.encode_request("m", {"x": np.zeros((1, 64), np.float32)}, version="1")
    with pytest.raises(DomainError) as info:
        await plane.model_infer(request)
    assert info.value.code == grpc.StatusCode.INTERNAL and "ValueError" in info.value.message
    assert len(info.value.message) <= 400
    request.model_version = "2"
    with pytest.raises(DomainError) as info:
        await plane.model_infer(request)
    assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_a_runner_that_cannot_suspend_runs_in_the_callers_task(mlp_artifact):
    """No Task and timer per request for an unbatched predictor call (wait_for could not interrupt
    it anyway); a runner that can suspend (a batch queue) still runs under the deadline."""
    tasks = []

    async def run(inputs):
        tasks.append(asyncio.current_task())
        return {"fetch_name_0": np.zeros((1, 10), np.float32)}

    artifact = load_artifact(mlp_artifact[0])
    plane = DataPlane(timeout_s=5.0)
    request = codec.encode_request("m", {"x": np.zeros((1, 64), np.float32)})
    for suspends in (False, True):
        plane.swap({"m": RoutedModel("m", {"1": RoutedVersion("1", 1, artifact.signature, "p", run, suspends=suspends)})})
        await plane.model_infer(request)
    assert tasks[0] is asyncio.current_task() and tasks[1] is not asyncio.current_task()


async def test_stream_answers_each_request_in_order_errors_inline(plane):
    x = np.zeros((1, 64), np.float32)
    requests = [codec.encode_request("mlp", {"x": x}, version="1", request_id=str(i)) for i in range(5)]
    requests.insert(2, codec.encode_request("nope", {"x": x}, request_id="bad"))

    async def stream():
        for r in requests:
            yield r

    answers = [a async for a in plane.model_stream_infer(stream())]
    assert [a.infer_response.id for a in answers] == ["0", "1", "bad", "2", "3", "4"]
    assert answers[2].error_message.startswith("NOT_FOUND") and not answers[3].error_message


async def test_every_inference_is_observed_with_its_code(mlp_artifact):
    seen = []
    plane = DataPlane(observe=lambda model, version, code, seconds: seen.append((model, version, code)))
    plane.swap({"mlp": RoutedModel("mlp", {"1": _local(mlp_artifact[0])})})
    await plane.model_infer(codec.encode_request("mlp", {"x": np.zeros((2, 64), np.float32)}))
    for bad in (codec.encode_request("mlp", {"x": np.zeros((2, 3), np.float32)}), codec.encode_request("zz", {})):
        with pytest.raises(DomainError):
            await plane.model_infer(bad)

    async def stream():
        yield codec.encode_request("mlp", {"x": np.zeros((1, 64), np.float32)})

    _ = [a async for a in plane.model_stream_infer(stream())]
    assert seen == [("mlp", "1", "OK"), ("mlp", "1", "INVALID_ARGUMENT"), ("", "", "NOT_FOUND"), ("mlp", "1", "OK")]


def test_a_known_model_not_served_here_is_unavailable_and_not_ready_an_unknown_one_not_found():
    """The server app's plane: the installation's names are known; a call for one reaches it
    only while the model's own app does not answer (a redeploy after a head restart)."""
    from paddleray.services.common.errors import Unavailable

    plane = DataPlane(not_found_hint=": no deployment serves it")
    plane.swap({})
    plane.known = frozenset({"mlp"})
    with pytest.raises(Unavailable, match="'mlp' is not answering yet"):
        plane.route(pb.ModelInferRequest(model_name="mlp"))
    assert plane.model_ready(pb.ModelReadyRequest(name="mlp")).ready is False
    with pytest.raises(NotFound, match="'other' is not served"):
        plane.route(pb.ModelInferRequest(model_name="other"))
