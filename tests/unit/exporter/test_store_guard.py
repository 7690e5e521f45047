"""The store guard's rules on a real Redis, with the GCS owner record given by the test."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from paddleray.exporter.v1 import deployment_pb2
from paddleray.services.common import errors
from paddleray.services.exporter.store import keys, store_guard
from paddleray.services.exporter.store.deployment_store import DeploymentRecord, DeploymentStore
from paddleray.services.exporter.store.store_guard import StoreGuard

pytestmark = pytest.mark.unit
RECORD = DeploymentRecord(deployment_pb2.Deployment(name="deployments/d"), gen=1)


@pytest.fixture
async def store(redis_url):
    client = aioredis.Redis.from_url(redis_url)
    yield DeploymentStore(client)
    await client.aclose()


def owner_of(record: dict | None):
    async def owner():
        return record
    return owner


async def test_a_new_installation_makes_its_marker_and_a_marker_gone_freezes_until_restored(store):
    guard = StoreGuard(store, owner_of(None))
    assert await guard.check([]) and guard.lost == ""
    marker = await store.installation_marker()
    assert marker and guard.seen == marker
    await store.redis.flushall()  # Redis back empty
    assert not await guard.check([RECORD])  # even with something recorded since
    assert "lost its installation marker" in guard.lost
    with pytest.raises(errors.FailedPrecondition, match="looks lost"):
        await guard.refuse_changes()
    assert not await guard.check([RECORD]), "the record in the store keeps it frozen"
    await store.redis.flushall()
    await store.redis.set(keys.installation(), marker)  # the old data restored
    assert await guard.check([RECORD]) and guard.lost == ""
    await guard.refuse_changes()


async def test_an_exporter_starting_without_its_store_leaves_an_ended_installations_models(store):
    dead = {"installation": "old", "job": "01000000", "served": ["a", "b"], "alive": False}
    assert not await StoreGuard(store, owner_of(dead)).check([])
    assert await store.installation_marker() is None, "no marker is made for a lost store"
    assert (await store.store_lost())["installation"] == "old"
    await store.redis.flushall()
    # A live owner is another installation (ownership refuses it) or this very driver: not a lost store.
    assert await StoreGuard(store, owner_of({**dead, "alive": True})).check([])
    await store.redis.flushall()
    # An owner that serves nothing, or never recorded what it serves: a new installation.
    assert await StoreGuard(store, owner_of({**dead, "served": []})).check([])
    await store.redis.flushall()
    assert await StoreGuard(store, owner_of({"installation": "old", "job": "01000000", "alive": False})).check([])


async def test_an_empty_registry_while_serve_runs_this_installations_models_until_confirmed(store):
    marker = await store.installation_id()
    asked = []

    async def owner():
        asked.append(1)
        return {"installation": marker, "job": "02000000", "served": ["a"], "alive": True}

    guard = StoreGuard(store, owner)
    assert await guard.check([RECORD]) and not asked, "a store with deployments asks the GCS nothing"
    assert await guard.check([], served=[]) and not asked, "nor one whose exporter served nothing last"
    assert not await guard.check([])
    assert "records no deployment while Ray Serve runs 1 models" in guard.lost
    assert "nothing to confirm" not in await store_guard.confirm(store)
    assert await store.loss_confirmed() and await store.installation_marker() == marker
    assert await guard.check([]) and guard.lost == ""
    await guard.applied()
    assert not await store.loss_confirmed(), "the confirmation is used by one apply"
    assert "nothing to confirm" in await store_guard.confirm(store)
