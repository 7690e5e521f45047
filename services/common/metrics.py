"""Prometheus metrics shared by every service, and the /metrics endpoint."""

from __future__ import annotations

from prometheus_client import Counter, Histogram, start_http_server

GRPC_REQUESTS = Counter(
    "paddleray_grpc_requests_total", "gRPC calls handled, by method and status code.", ["method", "code"]
)
GRPC_LATENCY = Histogram(
    "paddleray_grpc_request_seconds",
    "Time to answer unary gRPC calls.",
    ["method"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
)


def serve_metrics(port: int, host: str = "127.0.0.1") -> int:
    """Starts the /metrics HTTP endpoint in a thread; returns the bound port."""
    server, _thread = start_http_server(port, addr=host)
    return server.server_port
