"""Runs in: a Serve replica.

The gRPC services Ray Serve serves for us (gRPCOptions.grpc_servicer_functions), registered
with request deserializers that never raise.

Serve's gRPC servers (each model replica's direct-ingress server behind HAProxy, and its
fallback proxy) keep the request deserializer of the handlers a servicer function registers
and route each method to the deployment method of the same name. With the generated
`FromString` a body that is not the message (a fuzzer's bytes, another service's request)
fails inside grpc's deserialization and reaches the client as UNKNOWN (measured: 634 of
10,000 fuzzed requests). Here such a body becomes `Undecodable`, which the methods answer
with INVALID_ARGUMENT naming the message they expected (v2_servicer.py).

Services: inference.GRPCInferenceService (v2), grpc.health.v1.Health (the model's
readiness, for load balancers and `grpc_health_probe`) and grpc.reflection.v1.ServerReflection.
Serve enables reflection v1alpha itself; grpcurl, Postman and newer clients ask v1 first, so v1 is
registered beside it as a passthrough service (answered on the server, not routed to a replica
method), by the same v1alpha servicer: the two protocols are the same messages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor

from paddleray.services.common import ray_private

# Import paths for gRPCOptions.grpc_servicer_functions.
INFERENCE = "paddleray.services.exporter.serving.replica.grpc_services.add_inference_service"
HEALTH = "paddleray.services.exporter.serving.replica.grpc_services.add_health_service"
REFLECTION_V1 = "paddleray.services.exporter.serving.replica.grpc_services.add_reflection_v1_service"
# Reflection last: its list of services names the ones registered before it.
SERVICER_FUNCTIONS = [INFERENCE, HEALTH, REFLECTION_V1]
INFERENCE_SERVICE = "inference.GRPCInferenceService"
HEALTH_SERVICE = "grpc.health.v1.Health"
REFLECTION_V1_SERVICE = "grpc.reflection.v1.ServerReflection"


@dataclass(frozen=True)
class Undecodable:
    """A request body that did not parse as `expected` (a message type name)."""

    expected: str
    error: str


def tolerant(message_class: Any) -> Callable[[bytes], Any]:
    name = message_class.DESCRIPTOR.full_name

    def parse(data: bytes) -> Any:
        try:
            return message_class.FromString(data)
        except Exception as exc:  # noqa: BLE001 - DecodeError and its kin: answered INVALID_ARGUMENT
            return Undecodable(name, f"{type(exc).__name__}: {str(exc)[:200]}")

    return parse


def _register(service: ServiceDescriptor, servicer: Any, server: Any) -> None:
    handlers = {}
    for method in service.methods:
        request = message_factory.GetMessageClass(method.input_type)
        response = message_factory.GetMessageClass(method.output_type)
        make = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[method.client_streaming, method.server_streaming]
        handlers[method.name] = make(getattr(servicer, method.name), request_deserializer=tolerant(request),
                                     response_serializer=response.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
    if hasattr(server, "add_registered_method_handlers"):
        server.add_registered_method_handlers(service.full_name, handlers)


def add_inference_service(servicer: Any, server: Any) -> None:
    from paddleray.inference.v2 import grpc_service_pb2 as pb

    _register(pb.DESCRIPTOR.services_by_name["GRPCInferenceService"], servicer, server)


def add_health_service(servicer: Any, server: Any) -> None:
    from grpc_health.v1 import health_pb2

    _register(health_pb2.DESCRIPTOR.services_by_name["Health"], servicer, server)


def add_reflection_v1_service(servicer: Any, server: Any) -> None:
    from grpc_reflection.v1alpha import reflection, reflection_pb2

    ray_private.serve_passthrough_service(server, REFLECTION_V1_SERVICE)
    answerer = reflection.aio.ReflectionServicer(
        [INFERENCE_SERVICE, HEALTH_SERVICE, reflection.SERVICE_NAME, REFLECTION_V1_SERVICE])
    handler = grpc.stream_stream_rpc_method_handler(
        answerer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(REFLECTION_V1_SERVICE, {"ServerReflectionInfo": handler}),))
