"""create_server: a grpc.aio server with health, reflection, auth, error mapping and metrics.

`create_server(settings, services) -> (server, port)` only builds and binds; `run_service`
is what a service's main() calls: it starts the server, serves /metrics, writes the ready
file (the ports it bound, see write_ready_file), and on SIGTERM/SIGINT reports NOT_SERVING, drains in-flight calls for the grace
period, then runs the service's own shutdown hooks.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc import aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from paddleray.services.common.channels import server_credentials
from paddleray.services.common.credentials import Credentials
from paddleray.services.common.interceptors import (
    AuthInterceptor,
    ErrorMappingInterceptor,
    LocalIdentityInterceptor,
    MetricsInterceptor,
)
from paddleray.services.common.logs import configure_logging
from paddleray.services.common.metrics import serve_metrics
from paddleray.services.common.settings import ServiceSettings

log = logging.getLogger(__name__)

# Streams such as WatchJob live long; keep idle connections from being cut by middleboxes.
_SERVER_OPTIONS = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]


@dataclass(frozen=True)
class ServiceRegistration:
    """One gRPC service to serve: its full name and the generated add_*_to_server call."""

    full_name: str
    servicer: Any
    add_to_server: Callable[[Any, aio.Server], None]


@dataclass
class Server:
    """A built server and the health servicer that reports its services."""

    grpc_server: aio.Server
    port: int
    health: health.aio.HealthServicer
    service_names: list[str] = field(default_factory=list)

    async def set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ["", *self.service_names]:
            await self.health.set(name, status)


# grpcio-reflection serves only v1alpha; grpcurl, Postman and newer clients ask v1 first. The two
# protocols are the same messages under another package (v1 was copied from v1alpha, field for
# field), so one servicer answers both, v1 through a generic handler with v1alpha's serializers.
REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"


def _enable_reflection(service_names: list[str], server: aio.Server) -> None:
    servicer = reflection.aio.ReflectionServicer([*service_names, reflection.SERVICE_NAME, REFLECTION_V1])
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    v1 = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(REFLECTION_V1, {"ServerReflectionInfo": v1}),))


def create_server(settings: ServiceSettings, services: Sequence[ServiceRegistration]) -> tuple[Server, int]:
    """Builds and binds the server (not started). Returns it and the bound port."""
    interceptors: list[aio.ServerInterceptor] = [MetricsInterceptor()]
    credentials = Credentials.from_settings(settings)
    # Every call runs as someone the server names: the token's identity, or with auth off LOCAL.
    interceptors.append(AuthInterceptor(credentials) if credentials is not None else LocalIdentityInterceptor())
    interceptors.append(ErrorMappingInterceptor())
    grpc_server = aio.server(interceptors=interceptors, options=_SERVER_OPTIONS)
    names = []
    for service in services:
        service.add_to_server(service.servicer, grpc_server)
        names.append(service.full_name)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, grpc_server)
    _enable_reflection([*names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name], grpc_server)
    address = f"{settings.host}:{settings.port}"
    if settings.tls_cert_file is not None and settings.tls_key_file is not None:
        tls = server_credentials(settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file)
        port = grpc_server.add_secure_port(address, tls)
    else:
        port = grpc_server.add_insecure_port(address)
    if port == 0:
        raise RuntimeError(f"could not bind {settings.host}:{settings.port}")
    return Server(grpc_server, port, health_servicer, names), port


async def start_server(
    settings: ServiceSettings, services: Sequence[ServiceRegistration], serving: bool = True
) -> Server:
    """create_server, started and reporting `serving` (grpc's health servicer says SERVING
    until told otherwise, so the status is set before the port opens)."""
    server, _ = create_server(settings, services)
    await server.set_serving(serving)
    await server.grpc_server.start()
    return server


async def stop_server(server: Server, grace_period_s: float) -> None:
    await server.set_serving(False)
    await server.grpc_server.stop(grace_period_s)


async def run_service(
    service: str,
    settings: ServiceSettings,
    services: Sequence[ServiceRegistration],
    on_started: Callable[[], Awaitable[None]] | None = None,
    on_shutdown: Callable[[], Awaitable[None]] | None = None,
    readiness: Callable[[], Awaitable[bool]] | None = None,
    readiness_interval_s: float = 2.0,
) -> None:
    """Serves until SIGTERM or SIGINT, then shuts down gracefully.

    The server starts NOT_SERVING. Without `readiness` it reports SERVING once `on_started`
    has returned; with it, only while `readiness()` returns True (checked every
    readiness_interval_s from the start): a service whose dependencies are down, or not yet
    connected, says so.
    """
    configure_logging(service, settings.log_level, settings.log_json)
    server = await start_server(settings, services, serving=False)
    metrics_port = None
    watcher = None
    if readiness is not None:
        await server.set_serving(await readiness())
        watcher = asyncio.create_task(_watch_readiness(server, readiness, readiness_interval_s))
    if settings.metrics_port is not None:
        metrics_port = serve_metrics(settings.metrics_port, settings.host)
        log.info("metrics on http://%s:%d/metrics", settings.host, metrics_port)
    if on_started is not None:
        await on_started()
    if readiness is None:
        await server.set_serving(True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if settings.ready_file is not None:
        write_ready_file(settings.ready_file, service, settings.host, server.port, metrics_port)
    log.info("%s serving on %s:%d", service, settings.host, server.port)
    await stop.wait()
    log.info("%s shutting down (grace %.1fs)", service, settings.grace_period_s)
    if watcher is not None:
        watcher.cancel()
    await stop_server(server, settings.grace_period_s)
    if on_shutdown is not None:
        await on_shutdown()
    log.info("%s stopped", service)


async def _watch_readiness(server: Server, readiness: Callable[[], Awaitable[bool]], interval_s: float) -> None:
    serving = None
    while True:
        ready = await readiness()
        if ready != serving:
            log.log(logging.INFO if ready else logging.WARNING, "health: %s", "SERVING" if ready else "NOT_SERVING")
            await server.set_serving(ready)
            serving = ready
        await asyncio.sleep(interval_s)


def write_ready_file(path: Path, service: str, host: str, port: int, metrics_port: int | None) -> None:
    """Writes {"service", "pid", "parent_pid", "host", "port", "metrics_port"} atomically, once the server runs
    (parent_pid: the supervisor's, for a service of the local stack).

    The ports are the ones bound, so a launcher passes port 0 and reads them here: a port chosen
    ahead by the launcher and bound seconds later by the service can be taken in between
    (Ray's processes open ephemeral ports all the time). Written last: a reader that sees the
    file can connect; health says whether it serves (NOT_SERVING while a dependency is down).
    """
    document = {"service": service, "pid": os.getpid(), "parent_pid": os.getppid(), "host": host, "port": port,
                "metrics_port": metrics_port}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(document))
    tmp.replace(path)
