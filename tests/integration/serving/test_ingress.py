"""ModelInfer and the other v2 RPCs end to end, with real exported Paddle models on the shared Ray
head, on both v2 paths: generated stubs -> Serve's gRPC proxy -> ingress -> per-version model
apps, and generated stubs -> the model's own endpoint, served by its replicas (direct_port)."""

from __future__ import annotations

import asyncio
import os

import grpc
import numpy as np
import pytest

from paddleray.inference.v2 import grpc_service_pb2 as pb
from paddleray.inference.v2 import grpc_service_pb2_grpc
from paddleray.services.exporter.serving import codec
from paddleray.services.exporter.serving.controller import ServingController
from paddleray.services.exporter.serving.spec import ServedModel, ServedVersion
from paddleray.services.localstack.ports import free_port
from support.serving import dynamic_forward

CPU = 0.1  # replicas reserve little so several fit on the 2-CPU test head


@pytest.fixture(scope="module")
def served(controller, artifacts):
    models = [
        ServedModel("mlp", [ServedVersion("1", str(artifacts["mlp1"][0]), num_cpus=CPU)], direct_port=free_port()),
        ServedModel("two", [ServedVersion("1", str(artifacts["two"][0]), num_cpus=CPU)], direct_port=free_port()),
    ]
    asyncio.run(controller.apply(models))
    return models


@pytest.fixture(scope="module", params=["proxy", "direct"])
def v2(request, controller, served):
    """v2("mlp"): a stub reaching that model through Serve's proxy, or through its own endpoint."""
    channels: dict[str, grpc.Channel] = {}

    def stub(model: str) -> grpc_service_pb2_grpc.GRPCInferenceServiceStub:
        if model not in channels:
            channels[model] = grpc.insecure_channel(address(model))
        return grpc_service_pb2_grpc.GRPCInferenceServiceStub(channels[model])

    def address(model: str) -> str:
        port = controller.grpc_port if request.param == "proxy" else next(
            m.direct_port for m in served if m.serving_name == model)
        return f"127.0.0.1:{port}"

    stub.address = address  # type: ignore[attr-defined]
    yield stub
    for channel in channels.values():
        channel.close()


def test_model_infer_matches_the_dynamic_model(v2, artifacts):
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    for raw in (True, False):
        response = v2("mlp").ModelInfer(codec.encode_request("mlp", {"x": x}, raw=raw, request_id="a"), timeout=30)
        assert response.model_version == "1" and response.id == "a"
        out = codec.decode_response(response)["fetch_name_0"]
        np.testing.assert_allclose(out, dynamic_forward(artifacts["mlp1"][1], x)[0], rtol=1e-5, atol=1e-5)


def test_a_request_and_an_answer_over_4_mib_pass_every_hop(v2, artifacts):
    """The public proxy takes up to 2 GiB; the gRPC hops behind it (proxy -> ingress -> model)
    take 4 MiB unless the node env raises it (node_env.py): a big batch must not fail inside.
    The model's own endpoint takes as much as the proxy."""
    x = np.random.default_rng(1).standard_normal((110_000, 64)).astype(np.float32)  # 28 MB in, 4.4 MB out
    unlimited = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    with grpc.insecure_channel(v2.address("mlp"), options=unlimited) as channel:
        big = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
        out = codec.decode_response(big.ModelInfer(codec.encode_request("mlp", {"x": x}), timeout=120))["fetch_name_0"]
    assert out.nbytes > 4 * 2**20
    np.testing.assert_allclose(out[-5:], dynamic_forward(artifacts["mlp1"][1], x[-5:])[0], rtol=1e-5, atol=1e-5)


def test_several_inputs_and_outputs(v2):
    x, n = np.ones((3, 4), np.float32), np.array([[1], [2], [3]], np.int64)
    out = codec.decode_response(v2("two").ModelInfer(codec.encode_request("two", {"x": x, "n": n}), timeout=30))
    assert out["m"].dtype == np.int64 and np.array_equal(out["m"], 2 * n) and out["y"].shape == (3, 3)


def _code(call, request) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=30)
    return info.value.code(), info.value.details()


def test_errors_are_clear_statuses(v2):
    stub = v2("mlp")
    code, details = _code(stub.ModelInfer, codec.encode_request("mlp", {"x": np.zeros((1, 3), np.float32)}))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "inputs[x].shape" in details and "[-1, 64]" in details
    code, details = _code(stub.ModelInfer, codec.encode_request("mlp", {"x": np.zeros((1, 64), np.float64)}))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "FP64 given" in details
    code, details = _code(stub.ModelInfer, codec.encode_request("nope", {"x": np.zeros((1, 64), np.float32)}))
    assert code == grpc.StatusCode.NOT_FOUND and "nope" in details
    code, _ = _code(stub.ModelInfer, codec.encode_request("mlp", {"x": np.zeros((1, 64), np.float32)}, version="7"))
    assert code == grpc.StatusCode.NOT_FOUND
    code, _ = _code(stub.ModelMetadata, pb.ModelMetadataRequest(name="nope"))
    assert code == grpc.StatusCode.NOT_FOUND


def test_every_rpc_is_served(v2):
    stub = v2("mlp")
    assert stub.ServerLive(pb.ServerLiveRequest(), timeout=30).live
    assert stub.ServerReady(pb.ServerReadyRequest(), timeout=30).ready
    assert stub.ServerMetadata(pb.ServerMetadataRequest(), timeout=30).name == "paddleray"
    assert stub.ModelReady(pb.ModelReadyRequest(name="mlp"), timeout=30).ready
    meta = stub.ModelMetadata(pb.ModelMetadataRequest(name="mlp"), timeout=30)
    assert meta.versions == ["1"] and [list(t.shape) for t in meta.inputs] == [[-1, 64]]
    x = np.zeros((1, 64), np.float32)
    requests = [codec.encode_request("mlp", {"x": x}, request_id=str(i)) for i in range(10)]
    requests[4] = codec.encode_request("mlp", {"x": np.zeros((1, 2), np.float32)}, request_id="4")
    answers = list(stub.ModelStreamInfer(iter(requests), timeout=60))
    assert [a.infer_response.id for a in answers] == [str(i) for i in range(10)]
    assert answers[4].error_message.startswith("INVALID_ARGUMENT") and not answers[5].error_message


def _listening_hosts(port: int) -> set[str]:
    """Local addresses listening on `port` (/proc/net/tcp and tcp6, state 0A); an IPv4-mapped
    IPv6 socket (what grpc binds for 127.0.0.1) as its IPv4 address, any other IPv6 one as '::'."""
    hosts = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if fields[3] != "0A" or int(hex_port, 16) != port:
                continue
            if len(address) == 32 and address[:24] != "0000000000000000FFFF0000":
                hosts.add("::")
                continue
            v4 = address[-8:]
            hosts.add(".".join(str(int(v4[i:i + 2], 16)) for i in (6, 4, 2, 0)))
    return hosts


def test_a_models_own_endpoint_serves_that_model_only_on_the_configured_host(controller, served):
    mlp = next(m for m in served if m.serving_name == "mlp")
    with grpc.insecure_channel(f"127.0.0.1:{mlp.direct_port}") as channel:
        stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
        code, details = _code(stub.ModelInfer, codec.encode_request("two", {"x": np.ones((1, 4), np.float32)}))
    assert code == grpc.StatusCode.NOT_FOUND and "served: mlp" in details
    assert controller.direct_host == "127.0.0.1" and _listening_hosts(mlp.direct_port) == {"127.0.0.1"}


def test_status_shows_live_replicas(controller, served):
    status = asyncio.run(controller.status())
    # Models an earlier test's apply served may still be draining (their apps DELETING).
    assert {"mlp", "two"} <= set(status)
    others = {name: model for name, model in status.items() if name not in ("mlp", "two")}
    assert all(v.state == "DELETING" and not v.serving for m in others.values() for v in m.versions.values()), others
    v1 = status["mlp"].versions["1"]
    assert v1.state == "READY" and v1.running_replicas == 1 and v1.target_replicas == 1 and v1.serving and v1.weight == 1.0


def test_an_apply_leaves_no_serve_router_in_the_driver(served):
    # The apply (here with own endpoints: it waited for the ingress and for each model app) asks
    # replicas from a Ray task. A DeploymentHandle in the driver starts Serve's router loop
    # thread, which nothing stops and which went on calling into Ray from the old cluster while
    # the exporter made a new driver after a head restart (routing_wait.py).
    from ray.serve._private.router import SingletonThreadRouter

    assert SingletonThreadRouter._asyncio_loop is None


def test_a_controller_joining_a_running_serve_reports_the_port_serve_really_uses(controller, served):
    # Serve keeps the proxy options it was first started with: an exporter configured for
    # another port that attaches to it (a restart with new settings, a second exporter) must
    # report Serve's port as the endpoint, or clients dial a port nothing listens on.
    other = ServingController(grpc_port=free_port(), http_host="127.0.0.1", http_port=free_port(),
                              deploy_timeout_s=240)
    asyncio.run(other.start())
    assert other.grpc_port == controller.grpc_port


def test_the_proxy_calls_the_ingress_over_grpc(stub, served):
    """The Ray head's environment reaches Serve's proxy (node_env.py: half the CPU per request)."""
    from pathlib import Path

    from paddleray.services.exporter.serving.node_env import SERVE_NODE_ENV

    proxies = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"ProxyActor" in Path(f"/proc/{pid}/cmdline").read_bytes():
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                proxies.append(dict(e.decode(errors="replace").split("=", 1) for e in environ if b"=" in e))
        except OSError:
            continue
    assert proxies, "no Serve proxy process found"
    for env in proxies:
        assert {k: env.get(k) for k in SERVE_NODE_ENV} == SERVE_NODE_ENV
    assert stub.ServerLive(pb.ServerLiveRequest(), timeout=30).live
