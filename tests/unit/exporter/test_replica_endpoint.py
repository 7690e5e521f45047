"""A model replica's own v2 endpoint without Ray: real grpc.aio servers on one SO_REUSEPORT port,
a real client load, and the drain that must fail no call (grpc's shutdown alone cancelled 16-29
a drain here)."""

from __future__ import annotations

import asyncio
import socket
from collections import Counter

import grpc
import numpy as np
import pytest

from paddleray.inference.v2 import grpc_service_pb2_grpc
from paddleray.services.exporter.serving import codec
from paddleray.services.exporter.serving.artifact import load_artifact
from paddleray.services.exporter.serving.dataplane import DataPlane, RoutedModel, RoutedVersion
from paddleray.services.exporter.serving.replica_endpoint import ReplicaEndpoint
from paddleray.services.exporter.serving.v2_servicer import V2Servicer
from paddleray.services.localstack.ports import free_port

pytestmark = pytest.mark.unit


def _endpoint(artifact_dir, port: int, name: str, serving_name: str = "") -> ReplicaEndpoint:
    """An endpoint whose 'predictor' answers which server it is in its output (and takes 1 ms)."""
    artifact = load_artifact(artifact_dir)

    async def run(inputs):
        await asyncio.sleep(0.001)
        return {"fetch_name_0": np.full((len(inputs["x"]), 10), float(name), np.float32)}

    plane = DataPlane()
    plane.swap({"mlp": RoutedModel("mlp", {"1": RoutedVersion("1", 1.0, artifact.signature, "onnxruntime_onnx", run)})})
    return ReplicaEndpoint(V2Servicer(plane), "127.0.0.1", port, serving_name=serving_name)


async def _load(port: int, stop: asyncio.Event, seen: Counter, concurrency: int = 32) -> None:
    request = codec.encode_request("mlp", {"x": np.zeros((1, 64), np.float32)})
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)

        async def loop() -> None:
            while not stop.is_set():
                try:
                    out = codec.decode_response(await stub.ModelInfer(request, timeout=10))["fetch_name_0"]
                    seen[f"server {int(out[0, 0])}"] += 1
                except grpc.aio.AioRpcError as exc:
                    seen[exc.code().name] += 1

        await asyncio.gather(*(loop() for _ in range(concurrency)))


async def test_a_draining_endpoint_hands_its_clients_to_the_one_beside_it_failing_none(mlp_artifact):
    port = free_port()
    old = _endpoint(mlp_artifact[0], port, "1")
    old.start()
    stop, seen = asyncio.Event(), Counter()
    load = asyncio.create_task(_load(port, stop, seen))
    await asyncio.sleep(0.5)
    new = _endpoint(mlp_artifact[0], port, "2")
    new.start()  # the same port: SO_REUSEPORT
    await asyncio.sleep(0.5)
    before = seen["server 1"]
    await old.stop()  # under load: every call in flight or held is answered
    after = seen["server 1"]
    await asyncio.sleep(0.5)
    stop.set()
    await load
    await new.stop()
    assert before > 0 and seen["server 2"] > 0, seen
    assert set(seen) == {"server 1", "server 2"}, seen  # no CANCELLED, no UNAVAILABLE
    assert seen["server 1"] - after <= 32, seen  # nothing answered by the old server once it stopped


async def test_a_port_held_by_another_program_is_a_clear_error():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        plane = DataPlane()
        endpoint = ReplicaEndpoint(V2Servicer(plane), "127.0.0.1", port)
        with pytest.raises(RuntimeError, match=f"cannot bind 127.0.0.1:{port}"):
            await asyncio.to_thread(endpoint.start)
        await endpoint.stop()


async def test_a_port_another_models_server_listens_on_is_refused_a_sibling_shares_it(mlp_artifact):
    """SO_REUSEPORT would let another installation's server (same Unix user) share the port."""
    port = free_port()
    first = _endpoint(mlp_artifact[0], port, "1", serving_name="mlp")
    await asyncio.to_thread(first.start)
    try:
        sibling = _endpoint(mlp_artifact[0], port, "2", serving_name="mlp")
        await asyncio.to_thread(sibling.start)  # the same model: shares the port
        await sibling.stop()
        foreign = _endpoint(mlp_artifact[0], port, "3", serving_name="other")
        with pytest.raises(RuntimeError, match="does not serve 'other'"):
            await asyncio.to_thread(foreign.start)
        await foreign.stop()
    finally:
        await first.stop()
