"""RegistryStore against a real Redis: version numbering, request_id idempotency, compare-and-set,
the delete guards (served, exporting) and listing, asserting on the keys each call writes."""

from __future__ import annotations

import pytest

from paddleray.exporter.v1 import model_pb2
from paddleray.services.exporter.store import keys
from support.exporter import new_model, new_version

pytestmark = pytest.mark.unit
S = model_pb2.ModelVersionState


async def test_versions_are_numbered_per_model_and_the_model_is_created_once(store, raw_redis):
    created, first = await store.create_version(new_model("digits"), new_version(), "owner-a", "")
    assert created and first.number == 1 and first.version.name == "models/digits/versions/1"
    _, second = await store.create_version(new_model("digits"), new_version(), "owner-a", "")
    _, other = await store.create_version(new_model("other", 2_000), new_version(), "owner-a", "")
    assert second.number == 2 and other.number == 1
    model = await store.get_model("digits")
    assert model.model.latest_version == 2 and model.model.name == "models/digits"
    assert await raw_redis.zcard(keys.models_by_time()) == 2
    assert [int(n) for n in await raw_redis.zrange(keys.versions("digits"), 0, -1)] == [1, 2]
    fields = await raw_redis.hgetall(keys.version("digits", 2))
    assert fields[b"owner"] == b"owner-a" and fields[b"state"] == str(S.MODEL_VERSION_STATE_EXPORTING).encode()
    # The name is derived from the key, not stored: the number is allocated inside the script.
    assert model_pb2.ModelVersion.FromString(fields[b"proto"]).name == ""
    assert await raw_redis.smembers(keys.active_exports()) == {b"digits/1", b"digits/2", b"other/1"}


async def test_request_id_returns_the_first_version(store, raw_redis):
    created, first = await store.create_version(new_model("digits"), new_version(), "owner-a", "req-1",
                                                 fingerprint="f1")
    # The store returns the first version with its request's fingerprint; exports.py judges.
    again, same = await store.create_version(new_model("digits"), new_version("x.y:z"), "owner-b", "req-1",
                                             fingerprint="f2")
    assert created and not again and same.version == first.version and same.request_fp == "f1"
    assert (await store.get_model("digits")).model.latest_version == 1
    assert 0 < await raw_redis.ttl(keys.export_request("req-1")) <= 24 * 3600
    assert (await store.version_of_request("req-1")).number == 1
    _, unkeyed = await store.create_version(new_model("digits"), new_version(), "owner-a", "", fingerprint="f3")
    assert unkeyed.request_fp == ""  # kept only with a request_id


async def test_update_is_compare_and_set_and_a_terminal_state_ends_the_active_export(store, raw_redis):
    _, record = await store.create_version(new_model("digits"), new_version(), "owner-a", "")
    ready = model_pb2.ModelVersion()
    ready.CopyFrom(record.version)
    ready.state = S.MODEL_VERSION_STATE_READY
    assert await store.update_version(record, ready) == 2
    assert await store.update_version(record, ready) is None  # record.gen is stale now
    stored = await store.get_version("digits", 1)
    assert stored.version.state == S.MODEL_VERSION_STATE_READY and stored.owner == "" and stored.gen == 2
    assert not await raw_redis.sismember(keys.active_exports(), "digits/1")


async def test_a_served_or_exporting_version_cannot_be_deleted(store, raw_redis):
    _, record = await store.create_version(new_model("digits"), new_version(), "owner-a", "")
    assert await store.delete_version("digits", 1) == ("exporting", "")
    done = model_pb2.ModelVersion()
    done.CopyFrom(record.version)
    done.state = S.MODEL_VERSION_STATE_READY
    await store.update_version(record, done)
    await raw_redis.sadd(keys.version_deployments("digits", 1), "prod", "canary")
    assert await store.delete_version("digits", 1) == ("deployed", "canary,prod")
    assert await store.delete_model("digits") == ("deployed", ["1", "canary,prod"])
    await raw_redis.delete(keys.version_deployments("digits", 1))
    assert await store.delete_version("digits", 1) == ("deleted", "")
    assert await store.delete_version("digits", 1) == ("missing", "")
    assert await store.get_version("digits", 1) is None


async def test_delete_model_removes_every_version_and_the_index_entry(store, raw_redis):
    for _ in range(2):
        _, record = await store.create_version(new_model("digits"), new_version(), "owner-a", "")
        failed = model_pb2.ModelVersion()
        failed.CopyFrom(record.version)
        failed.state = S.MODEL_VERSION_STATE_FAILED
        await store.update_version(record, failed)
    assert await store.delete_model("digits") == ("deleted", ["1", "2"])
    assert await raw_redis.keys(keys.PREFIX + "*") == []
    assert await store.delete_model("digits") == ("missing", [])


async def test_lists_are_newest_first_and_page_after_the_last_entry(store):
    for i, model_id in enumerate(["a", "b", "c"]):
        await store.create_version(new_model(model_id, 1_000 + i), new_version(), "o", "")
    for _ in range(2):
        await store.create_version(new_model("c"), new_version(), "o", "")
    page, last = await store.list_models(2, "")
    assert [m.name for m in page] == ["models/c", "models/b"] and last
    page, last = await store.list_models(2, last)
    assert [m.name for m in page] == ["models/a"] and last == ""
    versions, below = await store.list_versions("c", 2, None)
    assert [v.name for v in versions] == ["models/c/versions/3", "models/c/versions/2"] and below == 2
    versions, below = await store.list_versions("c", 2, below)
    assert [v.name for v in versions] == ["models/c/versions/1"] and below == 0


async def test_owner_leases_expire(store, raw_redis):
    await store.renew_owner("owner-a", 60_000)
    assert await store.owner_alive("owner-a") and not await store.owner_alive("owner-b")
    assert 0 < await raw_redis.pttl(keys.owner_lease("owner-a")) <= 60_000
    await store.release_owner("owner-a")
    assert not await store.owner_alive("owner-a")
