"""The v2 gRPC API end to end on the serving path: generated stubs -> Serve's HAProxy -> a replica
of the model's own app (no proxy actor, no ingress hop), with real exported Paddle models on the
shared Ray head. Calls carry `application: <model>` (HAProxy routes between apps by it)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import grpc
import numpy as np
import pytest

from paddleray.inference.v2 import grpc_service_pb2 as pb
from paddleray.services.exporter.serving import replica_state
from paddleray.services.exporter.serving.control.controller import ServingController
from paddleray.services.exporter.serving.replica import codec
from paddleray.services.exporter.serving.spec import ServedModel, ServedVersion
from paddleray.services.localstack.ports import free_port
from support.serving import application_channel, dynamic_forward, v2_stub

CPU = 0.1  # replicas reserve little so several fit on the 2-CPU test head


@pytest.fixture(scope="module")
def served(controller, artifacts):
    models = [
        ServedModel("mlp", [ServedVersion("1", str(artifacts["mlp1"][0]))], num_cpus=CPU),
        ServedModel("two", [ServedVersion("1", str(artifacts["two"][0]))], num_cpus=CPU),
    ]
    asyncio.run(controller.apply(models))
    return models


@pytest.fixture(scope="module")
def v2(controller, served):
    """v2("mlp"): a stub whose calls go to that model's app."""
    channels: dict[str, grpc.Channel] = {}

    def stub(model: str):
        if model not in channels:
            channels[model] = application_channel(f"127.0.0.1:{controller.grpc_port}", model)
        return v2_stub(channels[model])

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


def test_a_request_and_an_answer_over_4_mib_pass(controller, v2, artifacts):
    """HAProxy and the replica's gRPC server take what Serve's public proxy took (2 GiB)."""
    x = np.random.default_rng(1).standard_normal((110_000, 64)).astype(np.float32)  # 28 MB in, 4.4 MB out
    unlimited = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    with application_channel(f"127.0.0.1:{controller.grpc_port}", "mlp", unlimited) as channel:
        out = codec.decode_response(v2_stub(channel).ModelInfer(codec.encode_request("mlp", {"x": x}), timeout=120))
    assert out["fetch_name_0"].nbytes > 4 * 2**20
    np.testing.assert_allclose(out["fetch_name_0"][-5:], dynamic_forward(artifacts["mlp1"][1], x[-5:])[0],
                               rtol=1e-5, atol=1e-5)


def test_several_inputs_and_outputs(v2):
    x, n = np.ones((3, 4), np.float32), np.array([[1], [2], [3]], np.int64)
    out = codec.decode_response(v2("two").ModelInfer(codec.encode_request("two", {"x": x, "n": n}), timeout=30))
    assert out["m"].dtype == np.int64 and np.array_equal(out["m"], 2 * n) and out["y"].shape == (3, 3)


def _code(call, request, **kw) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=30, **kw)
    return info.value.code(), info.value.details()


def test_errors_are_clear_statuses(v2):
    stub = v2("mlp")
    code, details = _code(stub.ModelInfer, codec.encode_request("mlp", {"x": np.zeros((1, 3), np.float32)}))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "inputs[x].shape" in details and "[-1, 64]" in details
    code, details = _code(stub.ModelInfer, codec.encode_request("mlp", {"x": np.zeros((1, 64), np.float64)}))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "FP64 given" in details
    code, _ = _code(stub.ModelInfer, codec.encode_request("mlp", {"x": np.zeros((1, 64), np.float32)}, version="7"))
    assert code == grpc.StatusCode.NOT_FOUND
    code, _ = _code(stub.ModelMetadata, pb.ModelMetadataRequest(name="nope"))
    assert code == grpc.StatusCode.NOT_FOUND


def test_not_found_names_only_what_was_asked(v2):
    """Issue 21.6: a NOT_FOUND listed every served model (of every tenant)."""
    code, details = _code(v2("mlp").ModelInfer, codec.encode_request("nope", {"x": np.zeros((1, 64), np.float32)}))
    assert code == grpc.StatusCode.NOT_FOUND and "'nope'" in details
    assert "two" not in details
    code, details = _code(v2("mlp").ModelReady, pb.ModelReadyRequest(name="mlp", version="9"))
    assert code == grpc.StatusCode.NOT_FOUND and "served" not in details and "'1'" not in details


def test_echoed_values_are_bounded(v2):
    """Issue 21.9: a 100 KB model name made the NOT_FOUND too big for the client to read."""
    long = "m" * 100_000
    for request, call in ((pb.ModelMetadataRequest(name=long), v2("mlp").ModelMetadata),
                          (codec.encode_request(long, {"x": np.zeros((1, 64), np.float32)}), v2("mlp").ModelInfer)):
        code, details = _code(call, request)
        assert code == grpc.StatusCode.NOT_FOUND and len(details) < 400, (code, len(details))
    bad = codec.encode_request("mlp", {"x": np.zeros((1, 64), np.float32)})
    bad.inputs[0].name = "i" * 100_000
    code, details = _code(v2("mlp").ModelInfer, bad)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and len(details) < 600


def test_an_undecodable_request_is_invalid_argument(controller):
    """Issue 21.8: bytes that are not the request message were UNKNOWN."""
    with application_channel(f"127.0.0.1:{controller.grpc_port}", "mlp") as channel:
        for method in ("ModelInfer", "ModelMetadata", "ServerLive"):
            call = channel.unary_unary(f"/inference.GRPCInferenceService/{method}",
                                       request_serializer=lambda b: b, response_deserializer=lambda b: b)
            code, details = _code(call, b"\xff\xff\xff\x01 not a protobuf")
            assert code == grpc.StatusCode.INVALID_ARGUMENT and "not a valid inference." in details, (method, details)


def test_every_rpc_is_served_with_health_and_reflection(v2, controller):
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

    # Issue 19.4: health and reflection on the endpoint a deployment shows.
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with application_channel(f"127.0.0.1:{controller.grpc_port}", "mlp") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        serving = health_pb2.HealthCheckResponse.SERVING
        assert health.Check(health_pb2.HealthCheckRequest(service=""), timeout=30).status == serving
        assert health.Check(health_pb2.HealthCheckRequest(service="mlp"), timeout=30).status == serving
        assert health.Check(health_pb2.HealthCheckRequest(service="other"), timeout=30).status == \
            health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        [answer] = list(reflection.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                                         timeout=30))
        # v1 (what grpcurl and Postman ask first) answers like v1alpha, symbols included.
        v1 = channel.stream_stream("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                                   request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                                   response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
        [v1_list, v1_file] = list(v1(iter([
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol="inference.GRPCInferenceService"),
        ]), timeout=30))
    services = {s.name for s in answer.list_services_response.service}
    assert {"inference.GRPCInferenceService", "grpc.health.v1.Health"} <= services
    assert {s.name for s in v1_list.list_services_response.service} >= {
        "inference.GRPCInferenceService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"}
    assert v1_file.file_descriptor_response.file_descriptor_proto, v1_file


def _listening_hosts(port: int) -> set[str]:
    """Local addresses listening on `port` (/proc/net/tcp and tcp6, state 0A); an IPv4-mapped
    IPv6 socket as its IPv4 address, any other IPv6 one as '::'."""
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


def test_the_endpoints_listen_on_the_configured_host_only(controller, served):
    assert controller.http_host == "127.0.0.1"
    assert _listening_hosts(controller.grpc_port) == {"127.0.0.1"}
    assert _listening_hosts(controller.http_port) == {"127.0.0.1"}


def _replica_processes(app: str) -> list[dict]:
    from paddleray.services.common import ray_private

    details = ray_private.serve_details()
    deployment = details["applications"][app]["deployments"]["Model"]
    return [r for r in deployment["replicas"] if r["state"] == "RUNNING"]


def test_no_thread_or_predictor_per_request(v2):
    """Issue 20.1: a synchronous method ran on a new thread per call, and the thread-local
    predictor was cloned per request. The replica's threads and predictors stay as they are."""
    [replica] = _replica_processes("mlp")
    threads = Path(f"/proc/{replica['pid']}/task")
    stub = v2("mlp")
    request = codec.encode_request("mlp", {"x": np.zeros((1, 64), np.float32)})
    for _ in range(20):
        stub.ModelInfer(request, timeout=30)
    before = len(os.listdir(threads))
    for _ in range(200):
        stub.ModelInfer(request, timeout=30)
    assert len(os.listdir(threads)) <= before + 2  # Ray's own threads may come and go
    report = replica_state.reports("mlp")["mlp", replica["replica_id"]]
    assert report["predictors"] == {"1": 1}


def test_status_shows_live_replicas(controller, served):
    status = asyncio.run(controller.status())
    assert {"mlp", "two"} <= set(status)
    v1 = status["mlp"].versions["1"]
    assert v1.state == "READY" and v1.running_replicas == 1 and v1.target_replicas == 1 and v1.serving and v1.weight == 1.0


def test_a_controller_joining_a_running_serve_reports_the_ports_serve_really_uses(controller, served):
    # Serve keeps the options it was first started with: an exporter configured for other ports
    # that attaches to it (a restart with new settings, a second exporter) must report Serve's.
    other = ServingController(grpc_port=free_port(), http_host="127.0.0.1", http_port=free_port(), deploy_timeout_s=240)
    asyncio.run(other.start())
    assert (other.grpc_port, other.http_port) == (controller.grpc_port, controller.http_port)


def test_haproxy_runs_with_the_node_env_and_its_own_ports(ray_head, served):
    """The Ray head's environment reaches Serve's HAProxy manager (node_env.py), and the ports it
    opens besides the endpoints are the head's own free ones, not Serve's fixed defaults."""
    from paddleray.services.exporter.serving.node_env import HAPROXY_PORT_DEFAULTS, SERVE_NODE_ENV

    assert set(ray_head.haproxy_ports) == set(HAPROXY_PORT_DEFAULTS)
    assert not set(ray_head.haproxy_ports.values()) & set(HAPROXY_PORT_DEFAULTS.values())
    mine = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"HAProxyManager" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        env = dict(e.decode(errors="replace").split("=", 1) for e in environ if b"=" in e)
        if env.get("RAY_SERVE_HAPROXY_STATS_PORT") == str(ray_head.haproxy_ports["RAY_SERVE_HAPROXY_STATS_PORT"]):
            mine.append(env)
    assert len(mine) == 1, "this head's HAProxy manager"
    assert {k: mine[0].get(k) for k in SERVE_NODE_ENV} == SERVE_NODE_ENV
    assert {k: int(mine[0][k]) for k in HAPROXY_PORT_DEFAULTS} == ray_head.haproxy_ports
    stats = ray_head.haproxy_ports["RAY_SERVE_HAPROXY_STATS_PORT"]
    assert _listening_hosts(stats), "HAProxy's stats page listens on the port the head chose"
