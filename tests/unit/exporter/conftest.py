"""The exporter's stores and domain managers on the test's private, flushed Redis, and real
exported artifacts for the serving tests."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from paddleray.services.exporter.deployment_store import DeploymentStore
from paddleray.services.exporter.store import RegistryStore
from support.serving import export_model


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


@pytest.fixture(scope="session")
def mlp_artifact(tmp_path_factory):
    """(artifact dir, dynamic model) of the 64-64-10 MLP."""
    return export_model(tmp_path_factory.mktemp("mlp") / "v1", "mlp")


@pytest.fixture(scope="session")
def two_artifact(tmp_path_factory):
    """(artifact dir, dynamic model) of a model with an FP32 and an INT64 input and output each."""
    return export_model(tmp_path_factory.mktemp("two") / "v1", "two")
