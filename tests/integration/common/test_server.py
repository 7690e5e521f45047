"""The shared server scaffolding over real channels: health, reflection, auth, error mapping."""

from __future__ import annotations

import asyncio
import time
import urllib.request

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from grpc_status import rpc_status

from paddleray.services.common import errors
from paddleray.services.common.metrics import serve_metrics
from paddleray.services.common.server import ServiceRegistration
from paddleray.services.common.settings import ServiceSettings
from paddleray.services.exporter.settings import ExporterSettings
from paddleray.trainer.v1 import trainer_service_pb2, trainer_service_pb2_grpc
from support import ServerThread

pytestmark = pytest.mark.integration


class ScriptedTrainer(trainer_service_pb2_grpc.TrainerServiceServicer):
    """Raises whatever the test asks for, to see how the interceptors map it."""

    def __init__(self) -> None:
        self.raise_next: BaseException | None = None

    async def GetRun(self, request, context):
        if self.raise_next is not None:
            raise self.raise_next
        return trainer_service_pb2.GetRunResponse()

    async def WatchRun(self, request, context):
        yield trainer_service_pb2.WatchRunResponse()
        if self.raise_next is not None:
            raise self.raise_next


@pytest.fixture
def scripted():
    servicer = ScriptedTrainer()
    registration = ServiceRegistration(
        "paddleray.trainer.v1.TrainerService", servicer, trainer_service_pb2_grpc.add_TrainerServiceServicer_to_server
    )
    server = ServerThread(ServiceSettings(port=0, auth_token="s3cret"), [registration])
    yield server, servicer
    server.stop()


def _stub(address: str, token: str | None = "s3cret"):
    channel = grpc.insecure_channel(address)
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    return trainer_service_pb2_grpc.TrainerServiceStub(channel), metadata, channel


def test_domain_error_maps_to_its_status_with_the_field_named(scripted):
    server, servicer = scripted
    stub, metadata, _ = _stub(server.address)
    servicer.raise_next = errors.InvalidArgument("spec.num_workers", "must be between 1 and 256")
    with pytest.raises(grpc.RpcError) as caught:
        stub.GetRun(trainer_service_pb2.GetRunRequest(name="runs/a"), metadata=metadata)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == "spec.num_workers: must be between 1 and 256"
    # The machine-readable status (AIP-193): a google.rpc.BadRequest naming the field and the rule.
    assert _field_violations(caught.value) == [("spec.num_workers", "must be between 1 and 256")]


def _field_violations(error: grpc.RpcError) -> list[tuple[str, str]]:
    status = rpc_status.from_call(error)
    assert status is not None and status.code == error.code().value[0] and status.message == error.details()
    [detail] = status.details
    bad_request = error_details_pb2.BadRequest()
    assert detail.Unpack(bad_request)
    return [(v.field, v.description) for v in bad_request.field_violations]


def test_other_domain_errors_carry_no_field_violations(scripted):
    server, servicer = scripted
    stub, metadata, _ = _stub(server.address)
    servicer.raise_next = errors.NotFound("runs/a does not exist")
    with pytest.raises(grpc.RpcError) as caught:
        stub.GetRun(trainer_service_pb2.GetRunRequest(name="runs/a"), metadata=metadata)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND and rpc_status.from_call(caught.value) is None


def test_unexpected_error_is_internal_without_leaking_the_traceback(scripted):
    server, servicer = scripted
    stub, metadata, _ = _stub(server.address)
    servicer.raise_next = KeyError("secret-internal-detail")
    with pytest.raises(grpc.RpcError) as caught:
        stub.GetRun(trainer_service_pb2.GetRunRequest(name="runs/a"), metadata=metadata)
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert "secret-internal-detail" not in caught.value.details()
    assert "Traceback" not in caught.value.details()
    assert "incident" in caught.value.details()


def test_errors_raised_mid_stream_are_mapped_too(scripted):
    server, servicer = scripted
    stub, metadata, _ = _stub(server.address)
    servicer.raise_next = errors.NotFound("runs/a not found")
    responses = stub.WatchRun(trainer_service_pb2.WatchRunRequest(name="runs/a"), metadata=metadata)
    with pytest.raises(grpc.RpcError) as caught:
        list(responses)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


# GetRunRequest.name (field 1, a string) with a byte that is not UTF-8; then bytes cut short.
UNDECODABLE = [b"\x0a\x02r\xff", b"\x0a\x05ru"]


@pytest.mark.parametrize("raw", UNDECODABLE)
def test_undecodable_requests_are_invalid_argument(scripted, raw):
    server, _ = scripted
    _, metadata, channel = _stub(server.address)
    unary = channel.unary_unary("/paddleray.trainer.v1.TrainerService/GetRun")
    with pytest.raises(grpc.RpcError) as caught:
        unary(raw, metadata=metadata)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith("request: not a valid message")
    [(field, _)] = _field_violations(caught.value)
    assert field == "request"
    streaming = channel.unary_stream("/paddleray.trainer.v1.TrainerService/WatchRun")
    with pytest.raises(grpc.RpcError) as caught:
        list(streaming(raw, metadata=metadata))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # Server reflection (a bidirectional stream; its first field is a string too).
    both_ways = channel.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
    with pytest.raises(grpc.RpcError) as caught:
        list(both_ways(iter([raw])))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize("token", [None, "wrong"])
def test_auth_rejects_missing_or_wrong_token(scripted, token):
    server, _ = scripted
    stub, metadata, _ = _stub(server.address, token=token)
    with pytest.raises(grpc.RpcError) as caught:
        stub.GetRun(trainer_service_pb2.GetRunRequest(name="runs/a"), metadata=metadata)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.WatchRun(trainer_service_pb2.WatchRunRequest(name="runs/a"), metadata=metadata))
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_auth_accepts_the_right_token_and_leaves_health_open(scripted):
    server, _ = scripted
    stub, metadata, channel = _stub(server.address)
    assert stub.GetRun(trainer_service_pb2.GetRunRequest(name="runs/a"), metadata=metadata) is not None
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert health.status == health_pb2.HealthCheckResponse.SERVING


def test_rpcs_a_servicer_leaves_out_answer_unimplemented_naming_the_method():
    # A servicer that overrides nothing (the generated base class) under the common server.
    from paddleray.exporter.v1 import exporter_service_pb2, exporter_service_pb2_grpc

    registration = ServiceRegistration(
        exporter_service_pb2.DESCRIPTOR.services_by_name["ExporterService"].full_name,
        exporter_service_pb2_grpc.ExporterServiceServicer(),
        exporter_service_pb2_grpc.add_ExporterServiceServicer_to_server,
    )
    server = ServerThread(ExporterSettings(port=0), [registration])
    try:
        stub = exporter_service_pb2_grpc.ExporterServiceStub(grpc.insecure_channel(server.address))
        with pytest.raises(grpc.RpcError) as caught:
            stub.GetModel(exporter_service_pb2.GetModelRequest(name="models/m"))
        assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "GetModel" in caught.value.details()
    finally:
        server.stop()


def test_reflection_describes_the_service_for_clients_that_have_no_protos(scripted):
    server, _ = scripted
    channel = grpc.insecure_channel(server.address)
    database = ProtoReflectionDescriptorDatabase(channel)
    services = set(database.get_services())
    assert {"paddleray.trainer.v1.TrainerService", "grpc.health.v1.Health"} <= services
    descriptor = database.FindFileContainingSymbol("paddleray.trainer.v1.TrainerService")
    assert descriptor.package == "paddleray.trainer.v1"


class SlowTrainer(trainer_service_pb2_grpc.TrainerServiceServicer):
    async def GetRun(self, request, context):
        await asyncio.sleep(1.0)
        return trainer_service_pb2.GetRunResponse(run={"name": request.name})


def test_shutdown_lets_in_flight_calls_finish_within_the_grace_period():
    registration = ServiceRegistration(
        "paddleray.trainer.v1.TrainerService", SlowTrainer(), trainer_service_pb2_grpc.add_TrainerServiceServicer_to_server
    )
    server = ServerThread(ServiceSettings(port=0), [registration])
    stub = trainer_service_pb2_grpc.TrainerServiceStub(grpc.insecure_channel(server.address))
    in_flight = stub.GetRun.future(trainer_service_pb2.GetRunRequest(name="runs/slow"))
    time.sleep(0.3)  # let the call reach the server before shutdown starts
    server.stop(grace=5.0)
    assert in_flight.result(timeout=10).run.name == "runs/slow"
    health = health_pb2_grpc.HealthStub(grpc.insecure_channel(server.address))
    with pytest.raises(grpc.RpcError):
        health.Check(health_pb2.HealthCheckRequest(), timeout=1)


def test_metrics_endpoint_counts_calls_by_method_and_code(scripted):
    server, servicer = scripted
    stub, metadata, _ = _stub(server.address)
    servicer.raise_next = errors.NotFound("runs/zzz not found")
    with pytest.raises(grpc.RpcError):
        stub.GetRun(trainer_service_pb2.GetRunRequest(name="runs/zzz"), metadata=metadata)
    port = serve_metrics(0)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'paddleray_grpc_requests_total{code="NOT_FOUND",method="/paddleray.trainer.v1.TrainerService/GetRun"}' in text


def test_reflection_v1_is_served_beside_v1alpha(scripted):
    from grpc_reflection.v1alpha import reflection_pb2

    server, _ = scripted
    channel = grpc.insecure_channel(server.address)
    names = {}
    for version in ("v1", "v1alpha"):
        call = channel.stream_stream(f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
                                     request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                                     response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
        [answer] = list(call(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10))
        names[version] = {s.name for s in answer.list_services_response.service}
        [described] = list(call(iter([reflection_pb2.ServerReflectionRequest(
            file_containing_symbol="paddleray.trainer.v1.TrainerService")]), timeout=10))
        assert described.file_descriptor_response.file_descriptor_proto
    assert names["v1"] == names["v1alpha"]
    assert {"paddleray.trainer.v1.TrainerService", "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection"} <= names["v1"]
