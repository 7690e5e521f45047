"""The controller's readiness probe (status() asks the endpoints clients use) counts a model
READY only when ModelReady says ready: the server app answers ready=false, without an error, for
a model of the installation whose own app does not answer (dataplane.known)."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest

from paddleray.inference.v2 import grpc_service_pb2 as pb
from paddleray.inference.v2 import grpc_service_pb2_grpc
from paddleray.services.exporter.serving.control.controller import ServingController

pytestmark = pytest.mark.unit


class _Readiness(grpc_service_pb2_grpc.GRPCInferenceServiceServicer):
    def ModelReady(self, request, context):  # noqa: N802 - the v2 method's name
        return pb.ModelReadyResponse(ready=request.name == "up")


@pytest.fixture
def endpoint():
    server = grpc.server(futures.ThreadPoolExecutor(2))
    grpc_service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(_Readiness(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(None)


def test_an_answer_that_is_not_ready_is_a_problem_and_a_ready_one_is_not(endpoint):
    controller = ServingController(endpoints=lambda: (endpoint, "http://127.0.0.1:1"))
    assert controller._probe_grpc("up") == ""
    assert controller._probe_grpc("coming") == f"not ready on the gRPC endpoint {endpoint}"
