"""gRPC health checks of the stack's services (plaintext, or TLS with the CA that signed them)."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from paddleray.services.common.channels import PemSource, open_blocking_channel


def serving(
    address: str, service: str = "", timeout: float = 1.0, tls_ca: PemSource | None = None,
    client_cert: tuple[PemSource, PemSource] | None = None, server_name: str | None = None,
) -> bool:
    """Whether the server at address reports SERVING for service ('' = the whole server)."""
    try:
        with open_blocking_channel(address, tls_ca, client_cert, server_name=server_name) as channel:
            response = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
    except grpc.RpcError:
        return False
    return response.status == health_pb2.HealthCheckResponse.SERVING
