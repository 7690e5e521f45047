"""Health follows a service's Readiness: NOT_SERVING until it says it can serve, and after."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from paddleray.services.common.readiness import Readiness
from paddleray.services.common.server import start_server, stop_server
from paddleray.services.common.settings import ServiceSettings

pytestmark = pytest.mark.integration

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def test_a_server_started_not_serving_follows_its_readiness_both_ways():
    server = await start_server(ServiceSettings(port=0), [], serving=False)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)

            async def status() -> int:
                return (await health.Check(health_pb2.HealthCheckRequest(), timeout=5)).status

            # grpc's health servicer says SERVING by default: the status is set before the port opens.
            assert await status() == NOT_SERVING
            readiness = Readiness()
            await readiness.follow(server.set_serving)
            assert await status() == NOT_SERVING
            readiness.set(True)
            await _settled()
            assert await status() == SERVING
            readiness.set(False)
            await _settled()
            assert await status() == NOT_SERVING
            readiness.unfollow(server.set_serving)
            readiness.set(True)
            await _settled()
            assert await status() == NOT_SERVING, "an unfollowed server keeps its status"
    finally:
        await stop_server(server, 0)


async def _settled() -> None:
    """Lets the listeners Readiness.set scheduled run."""
    for _ in range(3):
        await asyncio.sleep(0)
