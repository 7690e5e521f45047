"""ModelRegistry on a real Redis: UpdateModel's mask, paging tokens, deletion with artifacts, and
WatchModelVersion seeing every write."""

from __future__ import annotations

import asyncio

import pytest
from google.protobuf import field_mask_pb2

from paddleray.exporter.v1 import model_pb2
from paddleray.services.common import errors, paging
from paddleray.services.common.identity import LOCAL
from paddleray.services.exporter.registry.models import ModelRegistry
from support.exporter import new_model, new_version

pytestmark = pytest.mark.unit
S = model_pb2.ModelVersionState


@pytest.fixture
def registry(store, tmp_path) -> ModelRegistry:
    return ModelRegistry(store, tmp_path, watch_block_s=0.2)


async def test_update_model_changes_only_the_masked_fields(registry, store):
    await store.create_version(new_model("digits"), new_version(), "o", "")
    change = model_pb2.Model(name="models/digits", display_name="Digits", labels={"team": "vision"})
    updated = await registry.update_model(LOCAL, change, field_mask_pb2.FieldMask(paths=["labels"]))
    assert dict(updated.labels) == {"team": "vision"} and updated.display_name == "digits"
    assert updated.update_time.ToNanoseconds() > 0
    both = await registry.update_model(LOCAL, change, field_mask_pb2.FieldMask())
    assert both.display_name == "Digits" and (await registry.get_model(LOCAL, "models/digits")).display_name == "Digits"
    with pytest.raises(errors.InvalidArgument, match="update_mask"):
        await registry.update_model(LOCAL, change, field_mask_pb2.FieldMask(paths=["latest_version"]))
    with pytest.raises(errors.InvalidArgument, match=r"model.labels\['-x'\]"):
        await registry.update_model(LOCAL, model_pb2.Model(name="models/digits", labels={"-x": "1"}),
                                    field_mask_pb2.FieldMask(paths=["labels"]))
    with pytest.raises(errors.NotFound):
        await registry.update_model(LOCAL, model_pb2.Model(name="models/nope"), field_mask_pb2.FieldMask())


async def test_list_pages_with_tokens_bound_to_the_parent(registry, store):
    for _ in range(3):
        await store.create_version(new_model("digits"), new_version(), "o", "")
    page, token = await registry.list_versions(LOCAL, "models/digits", 2, "")
    assert [v.name for v in page] == ["models/digits/versions/3", "models/digits/versions/2"] and token
    page, token = await registry.list_versions(LOCAL, "models/digits", 2, token)
    assert [v.name for v in page] == ["models/digits/versions/1"] and token == ""
    _, first = await registry.list_versions(LOCAL, "models/digits", 1, "")
    with pytest.raises(errors.InvalidArgument, match="page_token"):
        await registry.list_versions(LOCAL, "models/other", 1, first)
    with pytest.raises(errors.InvalidArgument, match="page_size"):
        await registry.list_models(LOCAL, -1, "")
    with pytest.raises(errors.NotFound):
        await registry.list_versions(LOCAL, "models/other", 1, "")
    with pytest.raises(errors.InvalidArgument, match="parent"):
        await registry.list_versions(LOCAL, "digits", 1, "")


async def test_list_calls_coerce_a_large_page_size_and_bind_tokens_to_their_filters(registry, store):
    for model_id in ("a", "b", "c"):
        await store.create_version(new_model(model_id), new_version(), "o", "")
    models, token = await registry.list_models(LOCAL, paging.MAX_PAGE_SIZE + 1, "")
    assert len(models) == 3 and token == "", "above the maximum is coerced, not rejected (AIP-158)"
    versions, token = await registry.list_versions(LOCAL, "models/a", paging.MAX_PAGE_SIZE + 1, "")
    assert len(versions) == 1 and token == ""
    _, token = await registry.list_models(LOCAL, 1, "", tenant="default")
    assert token
    with pytest.raises(errors.InvalidArgument, match="other filters"):
        await registry.list_models(LOCAL, 1, token, tenant="")
    # A token whose position is no version number (isdigit() took "²", which int() refuses).
    forged = paging.encode_page_token("²", {"parent": "models/a"})
    with pytest.raises(errors.InvalidArgument, match="page_token"):
        await registry.list_versions(LOCAL, "models/a", 1, forged)


async def test_delete_model_removes_its_artifacts(registry, store, tmp_path):
    _, record = await store.create_version(new_model("digits"), new_version(), "o", "")
    with pytest.raises(errors.FailedPrecondition, match="still exporting"):
        await registry.delete_model(LOCAL, "models/digits")
    failed = model_pb2.ModelVersion()
    failed.CopyFrom(record.version)
    failed.state = S.MODEL_VERSION_STATE_FAILED
    await store.update_version(record, failed)
    (tmp_path / "models" / "digits" / "versions" / "1").mkdir(parents=True)
    await registry.delete_model(LOCAL, "models/digits")
    assert not (tmp_path / "models" / "digits").exists()
    with pytest.raises(errors.NotFound):
        await registry.get_model(LOCAL, "models/digits")


async def test_watch_sees_every_write_until_a_terminal_state(registry, store):
    _, record = await store.create_version(new_model("digits"), new_version(), "o", "")
    seen: list[int] = []

    async def watch():
        async for version in registry.watch_version(LOCAL, record.version.name):
            seen.append(version.state)

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0.1)
    for state in (S.MODEL_VERSION_STATE_VALIDATING, S.MODEL_VERSION_STATE_READY):
        current = await store.get_version("digits", 1)
        changed = model_pb2.ModelVersion()
        changed.CopyFrom(current.version)
        changed.state = state
        await store.update_version(current, changed)
    await asyncio.wait_for(watcher, 5)
    assert seen == [S.MODEL_VERSION_STATE_EXPORTING, S.MODEL_VERSION_STATE_VALIDATING, S.MODEL_VERSION_STATE_READY]
