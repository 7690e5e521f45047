"""Runs in: the exporter process.

ModelRegistry: reading, changing and deleting models and their versions.

Tenants (common.identity): a version is its model's tenant's. Another tenant's model or
version answers NOT_FOUND worded as for a missing one, lists hold the caller's tenant's
models, and read-only credentials cannot update or delete.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

from google.protobuf import field_mask_pb2

from paddleray.exporter.v1 import model_pb2
from paddleray.services.common import errors, identity, names, paging
from paddleray.services.common.identity import Identity
from paddleray.services.common.labels import validate_labels
from paddleray.services.common.storage import Storage
from paddleray.services.exporter.export.export_spec import MAX_DISPLAY_NAME
from paddleray.services.exporter.store.registry_store import TERMINAL_STATES, RegistryStore, VersionRecord

_MODEL_PATHS = ("display_name", "labels")


class ModelRegistry:
    def __init__(self, store: RegistryStore, storage_root: str | Path, watch_block_s: float = 1.0) -> None:
        self.store = store
        self.storage = Storage.for_root(storage_root)
        self.watch_block_s = watch_block_s

    def _delete_files(self, relative: str) -> None:
        """A model's or version's files, from a directory or an object store (blocking)."""
        self.storage.delete(relative)

    # -- models -------------------------------------------------------------------------------

    async def get_model(self, caller: Identity, name: str, field: str = "name") -> model_pb2.Model:
        model_id = names.MODEL.parse_one(name, field)
        record = await self.store.get_model(model_id)
        if record is None or not identity.visible(caller, record.model.tenant):
            raise errors.NotFound(f"{name} does not exist")
        return record.model

    async def list_models(self, caller: Identity, page_size: int, page_token: str,
                          tenant: str = "") -> tuple[list[model_pb2.Model], str]:
        size = paging.page_size(page_size)
        filters = {"tenant": tenant} if tenant else None
        after = paging.decode_page_token(page_token, filters, rpc="ListModels") or ""
        narrowed = identity.list_filter(caller, tenant)
        if narrowed is None:
            return [], ""
        models, last = await self.store.list_models(size, after, narrowed)
        return models, paging.encode_page_token(last, filters) if last else ""

    async def update_model(self, caller: Identity, model: model_pb2.Model, mask: field_mask_pb2.FieldMask) -> model_pb2.Model:
        identity.require_write(caller, "UpdateModel")
        model_id = names.MODEL.parse_one(model.name, "model.name")
        paths = list(mask.paths) or list(_MODEL_PATHS)
        for path in paths:
            if path not in _MODEL_PATHS:
                raise errors.InvalidArgument("update_mask", f"path {path!r} cannot be changed (only {', '.join(_MODEL_PATHS)})")
        if "display_name" in paths and len(model.display_name) > MAX_DISPLAY_NAME:
            raise errors.InvalidArgument("model.display_name", f"must be at most {MAX_DISPLAY_NAME} characters")
        if "labels" in paths:
            validate_labels(model.labels, "model.labels")
        for _ in range(5):
            record = await self.store.get_model(model_id)
            if record is None or not identity.visible(caller, record.model.tenant):
                raise errors.NotFound(f"{model.name} does not exist")
            changed = model_pb2.Model()
            changed.CopyFrom(record.model)
            if "display_name" in paths:
                changed.display_name = model.display_name
            if "labels" in paths:
                changed.labels.clear()
                changed.labels.update(model.labels)
            changed.update_time.FromNanoseconds(time.time_ns())
            if await self.store.update_model(record, changed) is not None:
                return changed
        raise errors.Aborted(f"{model.name} kept changing; retry")

    async def delete_model(self, caller: Identity, name: str) -> None:
        identity.require_write(caller, "DeleteModel")
        model_id = names.MODEL.parse_one(name)
        status, detail = await self.store.delete_model(model_id, _own_tenant(caller))
        if status == "missing":
            raise errors.NotFound(f"{name} does not exist")
        if status == "deployed":
            raise errors.FailedPrecondition(
                f"{name}/versions/{detail[0]} is served by deployments {detail[1]}: delete those first")
        if status == "exporting":
            raise errors.FailedPrecondition(f"{name}/versions/{detail[0]} is still exporting: wait until it ends")
        await asyncio.to_thread(self._delete_files, f"models/{model_id}")

    # -- versions -----------------------------------------------------------------------------

    async def get_version_record(self, caller: Identity, name: str, field: str = "name") -> VersionRecord:
        ids = names.MODEL_VERSION.parse(name, field)
        record = await self.store.get_version(ids["model"], int(ids["version"]))
        if record is None or not identity.visible(caller, record.version.tenant):
            raise errors.NotFound(f"{name} does not exist")
        return record

    async def get_version(self, caller: Identity, name: str) -> model_pb2.ModelVersion:
        return (await self.get_version_record(caller, name)).version

    async def list_versions(self, caller: Identity, parent: str, page_size: int, page_token: str) -> tuple[list[model_pb2.ModelVersion], str]:
        model_id = names.MODEL.parse_one(parent, "parent")
        size = paging.page_size(page_size)
        position = paging.decode_page_token(page_token, {"parent": parent}, "ListModelVersions")
        below = None
        if position is not None:
            if not names.is_version_number(position):
                raise errors.InvalidArgument("page_token", "not a token returned by ListModelVersions")
            below = int(position)
        record = await self.store.get_model(model_id)
        if record is None or not identity.visible(caller, record.model.tenant):
            raise errors.NotFound(f"{parent} does not exist")
        versions, last = await self.store.list_versions(model_id, size, below)
        return versions, paging.encode_page_token(str(last), {"parent": parent}) if last else ""

    async def delete_version(self, caller: Identity, name: str) -> None:
        identity.require_write(caller, "DeleteModelVersion")
        ids = names.MODEL_VERSION.parse(name)
        model_id, number = ids["model"], int(ids["version"])
        status, detail = await self.store.delete_version(model_id, number, _own_tenant(caller))
        if status == "missing":
            raise errors.NotFound(f"{name} does not exist")
        if status == "deployed":
            raise errors.FailedPrecondition(f"{name} is served by deployments {detail}: change or delete those first")
        if status == "exporting":
            raise errors.FailedPrecondition(f"{name} is still exporting: wait until it ends")
        await asyncio.to_thread(self._delete_files, f"models/{model_id}/versions/{number}")

    async def watch_version(self, caller: Identity, name: str) -> AsyncIterator[model_pb2.ModelVersion]:
        """The version now, then after every write, until a terminal state (or deletion)."""
        ids = names.MODEL_VERSION.parse(name)
        model_id, number = ids["model"], int(ids["version"])
        # The stream position first: a write between the two reads is then seen twice, never missed.
        after = await self.store.last_change(model_id, number)
        record = await self.get_version_record(caller, name)
        last = record.version
        yield last
        while last.state not in TERMINAL_STATES:
            changes = await self.store.changes_after(model_id, number, after, int(self.watch_block_s * 1000))
            for _, version in changes:
                version.tenant = record.version.tenant  # the stream's protos are stored without it
                if version != last:
                    last = version
                    yield version
            if changes:
                after = changes[-1][0]
            elif await self.store.get_version(model_id, number) is None:
                raise errors.NotFound(f"{name} was deleted")


def _own_tenant(caller: Identity) -> str:
    """The tenant a delete is restricted to, checked in the script that deletes: the caller's,
    or "" (any) for an admin."""
    return "" if caller.is_admin else caller.tenant
