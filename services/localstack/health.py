"""gRPC health checks of the stack's services."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def serving(address: str, service: str = "", timeout: float = 1.0) -> bool:
    """Whether the server at address reports SERVING for service ('' = the whole server)."""
    try:
        with grpc.insecure_channel(address) as channel:
            response = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
    except grpc.RpcError:
        return False
    return response.status == health_pb2.HealthCheckResponse.SERVING
