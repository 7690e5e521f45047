"""The exporter's stores and domain managers on the test's private, flushed Redis."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from paddleray.services.exporter.deployment_store import DeploymentStore
from paddleray.services.exporter.store import RegistryStore


@pytest.fixture
async def raw_redis(redis_url):
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def store(raw_redis) -> RegistryStore:
    return RegistryStore(raw_redis)


@pytest.fixture
def deployment_store(raw_redis) -> DeploymentStore:
    return DeploymentStore(raw_redis)
