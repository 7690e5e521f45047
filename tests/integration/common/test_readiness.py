"""A service's health: NOT_SERVING from the first moment, then whatever its readiness says."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from paddleray.services.common.server import _watch_readiness, start_server, stop_server
from paddleray.services.common.settings import ServiceSettings

pytestmark = pytest.mark.integration

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def test_a_server_started_not_serving_then_follows_its_readiness_both_ways():
    server = await start_server(ServiceSettings(port=0), [], serving=False)
    ready = False

    async def readiness() -> bool:
        return ready

    watcher = None
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)

            async def status() -> int:
                return (await health.Check(health_pb2.HealthCheckRequest(), timeout=5)).status

            async def becomes(wanted: int) -> int:
                for _ in range(500):  # the watcher polls every 10 ms
                    if (now := await status()) == wanted:
                        return now
                    await asyncio.sleep(0.01)
                return await status()

            # grpc's health servicer says SERVING by default: the status is set before the port opens.
            assert await status() == NOT_SERVING
            watcher = asyncio.create_task(_watch_readiness(server, readiness, 0.01))
            await asyncio.sleep(0.05)
            assert await status() == NOT_SERVING
            ready = True
            assert await becomes(SERVING) == SERVING
            ready = False
            assert await becomes(NOT_SERVING) == NOT_SERVING
    finally:
        if watcher is not None:
            watcher.cancel()
        await stop_server(server, 0)
