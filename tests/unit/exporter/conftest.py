"""The exporter's stores and domain managers on the test's private, flushed Redis, and real
exported artifacts for the serving tests."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from paddleray.services.exporter.deploy.deployments import DeploymentManager
from paddleray.services.exporter.deploy.reconciler import Reconciler
from paddleray.services.exporter.store.deployment_store import DeploymentStore
from paddleray.services.exporter.store.registry_store import RegistryStore
from support.serve_fakes import Cluster, Controller
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

@pytest.fixture
def controller() -> Controller:
    return Controller()


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


@pytest.fixture
def reconciler(deployment_store, store, controller, cluster, tmp_path) -> Reconciler:
    """A reconciler over the in-test Serve (support/serve_fakes.py)."""
    return Reconciler(deployment_store, store, controller, cluster, tmp_path)


@pytest.fixture
def manager(deployment_store, store, reconciler) -> DeploymentManager:
    """A DeploymentManager that wakes `reconciler` and shows its live state (test_deployments.py
    has one without a reconciler)."""
    return DeploymentManager(deployment_store, store, "127.0.0.1:9000", reconciler.wake, reconciler.live)


@pytest.fixture(scope="session")
def mlp_artifact(tmp_path_factory):
    """(artifact dir, dynamic model) of the 64-64-10 MLP."""
    return export_model(tmp_path_factory.mktemp("mlp") / "v1", "mlp")


@pytest.fixture(scope="session")
def two_artifact(tmp_path_factory):
    """(artifact dir, dynamic model) of a model with an FP32 and an INT64 input and output each."""
    return export_model(tmp_path_factory.mktemp("two") / "v1", "two")
