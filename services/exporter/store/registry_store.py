"""Runs in: the exporter process.

RegistryStore: models and their versions in Redis (keys.py, lua/*.lua).

A model is a hash (keys.model): `proto` is the serialized Model; beside it `gen` (bumped by
every write, the basis of compare-and-set), `latest` (the version counter; it is the Model's
latest_version, filled in on read) and `member` (its time-index entry). A version is a hash
(keys.version): `proto` is the ModelVersion without its name (the number is allocated inside
create_version.lua; the name is filled in on read), `gen`, `state` (read by the deployment
scripts, which must not parse protobuf) and `owner` (the exporter replica whose task runs the
export while it is not terminal).

Tenants: a model's hash holds its `tenant` (set when the model is created, never changed) and
every version's hash a copy of it, so that the scripts can check it in the step that writes;
the protos are stored without it and it is filled in on read. Records written before tenants
existed have none: they are DEFAULT_TENANT's.

Every check-then-write is one Lua script; all other reads are plain commands. The store knows
nothing of which transitions are legal: exports.py and models.py decide.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from importlib import resources
from typing import TypeVar

import redis.asyncio as aioredis

from paddleray.exporter.v1 import model_pb2
from paddleray.services.common import names, states
from paddleray.services.common.identity import DEFAULT_TENANT
from paddleray.services.exporter.store import keys

TERMINAL_STATES = states.MODEL_VERSION_TERMINAL
# A version changes a handful of times (EXPORTING, VALIDATING, its end): the cap is a backstop.
_CHANGES_CAP = 100
_SCAN_CHUNK = 200
_VERSION_FIELDS = ("proto", "gen", "owner", "tenant", "request_fp")
_MODEL_FIELDS = ("proto", "gen", "latest", "tenant")
_Stored = TypeVar("_Stored", model_pb2.Model, model_pb2.ModelVersion)


class OtherTenantsModel(Exception):
    """create_version named a model that exists in another tenant (the caller could not adopt it)."""

    def __init__(self, tenant: str) -> None:
        super().__init__(tenant)
        self.tenant = tenant


def script(name: str) -> str:
    return resources.files("paddleray.services.exporter.store").joinpath("lua", name).read_text()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def version_name(model_id: str, number: int) -> str:
    return names.MODEL_VERSION.format(model=model_id, version=number)


@dataclass
class ModelRecord:
    model: model_pb2.Model
    gen: int

    @property
    def model_id(self) -> str:
        return names.MODEL.parse_one(self.model.name)


@dataclass
class VersionRecord:
    version: model_pb2.ModelVersion
    gen: int
    owner: str
    model_id: str
    number: int
    # Fingerprint of the ExportModel request that created it with a request_id (common/idempotency.py).
    request_fp: str = ""

    @property
    def active_member(self) -> str:
        return f"{self.model_id}/{self.number}"


class RegistryStore:
    def __init__(self, client: aioredis.Redis, request_ttl_s: int = 24 * 3600) -> None:
        self.redis = client
        self.request_ttl_s = request_ttl_s
        self._create_version = client.register_script(script("create_version.lua"))
        self._update_version = client.register_script(script("update_version.lua"))
        self._delete_version = client.register_script(script("delete_version.lua"))
        self._delete_model = client.register_script(script("delete_model.lua"))
        self._cas = client.register_script(script("cas_write.lua"))

    # -- create / read ----------------------------------------------------------------------

    async def create_version(
        self, model: model_pb2.Model, version: model_pb2.ModelVersion, owner: str, request_id: str,
        tenant: str = DEFAULT_TENANT, adopt_tenant: bool = False, fingerprint: str = "",
    ) -> tuple[bool, VersionRecord]:
        """Writes a new version (and its model, in `tenant`, when new); with a request_id, the
        request's fingerprint is kept with the version (VersionRecord.request_fp). Returns (True,
        the new version) or (False, the version first created with request_id). A model of
        another tenant raises OtherTenantsModel unless adopt_tenant: the version then joins it."""
        model_id = names.MODEL.parse_one(model.name)
        model = _without_tenant(model)
        version = _without_tenant(version)
        member = f"{model.create_time.ToMilliseconds():015d}:{model_id}"
        result = await self._create_version(
            keys=[keys.export_request(request_id), keys.model(model_id), keys.models_by_time(),
                  keys.versions(model_id), keys.active_exports()],
            args=[model_id, model.SerializeToString(), member, version.SerializeToString(), version.state, owner,
                  self.request_ttl_s, "1" if request_id else "0", keys.version_prefix(model_id),
                  keys.version_changes_prefix(model_id), _CHANGES_CAP, tenant, "1" if adopt_tenant else "0",
                  fingerprint],
        )
        if result[0] == b"tenant_mismatch":
            raise OtherTenantsModel(result[1].decode())
        if result[0] == b"duplicate":
            first_model, number = result[1].decode().rsplit("/", 1)
            record = await self.get_version(first_model, int(number))
            if record is None:  # deleted since: the request may create anew
                raise LookupError(result[1].decode())
            return False, record
        record = await self.get_version(model_id, int(result[1]))
        assert record is not None  # written by the script just now
        return True, record

    async def get_model(self, model_id: str) -> ModelRecord | None:
        return _model_record(*await self.redis.hmget(keys.model(model_id), _MODEL_FIELDS))

    async def get_version(self, model_id: str, number: int) -> VersionRecord | None:
        row = await self.redis.hmget(keys.version(model_id, number), _VERSION_FIELDS)
        return _version_record(model_id, number, *row)

    async def version_of_request(self, request_id: str) -> VersionRecord | None:
        """The version an ExportModel request_id created, while it exists."""
        first = await self.redis.get(keys.export_request(request_id))
        if first is None:
            return None
        model_id, number = first.decode().rsplit("/", 1)
        return await self.get_version(model_id, int(number))

    async def version_deployments(self, model_id: str, number: int) -> set[str]:
        return {m.decode() for m in await self.redis.smembers(keys.version_deployments(model_id, number))}

    # -- compare-and-set writes -----------------------------------------------------------

    async def update_version(self, record: VersionRecord, version: model_pb2.ModelVersion) -> int | None:
        """Writes `version` if the record is still at record.gen; returns the new gen, or None
        when it changed or was deleted meanwhile."""
        stored = _without_tenant(version)
        stored.ClearField("name")
        result = await self._update_version(
            keys=[keys.version(record.model_id, record.number), keys.active_exports(),
                  keys.version_changes(record.model_id, record.number)],
            args=[record.gen, stored.SerializeToString(), version.state,
                  "1" if version.state in TERMINAL_STATES else "0", record.active_member, _CHANGES_CAP],
        )
        return int(result[1]) if result[0] == b"ok" else None

    async def update_model(self, record: ModelRecord, model: model_pb2.Model) -> int | None:
        stored = _without_tenant(model)
        stored.latest_version = 0
        result = await self._cas(keys=[keys.model(record.model_id)], args=[record.gen, "proto", stored.SerializeToString()])
        return int(result[1]) if result[0] == b"ok" else None

    async def delete_version(self, model_id: str, number: int, tenant: str = "") -> tuple[str, str]:
        """("deleted" | "missing" | "exporting", "") or ("deployed", comma-separated deployment ids).
        With a tenant, a version of another tenant is "missing"."""
        result = await self._delete_version(
            keys=[keys.version(model_id, number), keys.versions(model_id), keys.version_deployments(model_id, number),
                  keys.active_exports(), keys.version_changes(model_id, number)],
            args=[number, f"{model_id}/{number}", tenant],
        )
        return result[0].decode(), result[1].decode() if len(result) > 1 else ""

    async def delete_model(self, model_id: str, tenant: str = "") -> tuple[str, list[str]]:
        """("deleted", version numbers removed) | ("missing", []) | ("exporting", [n])
        | ("deployed", [n, deployment ids]). With a tenant, a model of another tenant is "missing"."""
        result = await self._delete_model(
            keys=[keys.model(model_id), keys.models_by_time(), keys.versions(model_id), keys.active_exports()],
            args=[model_id, keys.version_prefix(model_id), keys.version_deployments_prefix(model_id),
                  keys.version_changes_prefix(model_id), tenant],
        )
        return result[0].decode(), [x.decode() for x in result[1:]]

    # -- listing ------------------------------------------------------------------------------

    async def list_models(self, page_size: int, after: str, tenant: str = "") -> tuple[list[model_pb2.Model], str]:
        """Newest first, starting after index member `after` ("" for the first page), only
        `tenant`'s when given. Returns the page and the member of its last model ("" when the
        index holds nothing after it)."""
        page: list[model_pb2.Model] = []
        while True:
            start = f"({after}" if after else "+"
            members = await self.redis.zrange(keys.models_by_time(), start, "-", desc=True, bylex=True, offset=0,
                                              num=_SCAN_CHUNK)
            async with self.redis.pipeline(transaction=False) as pipe:
                for member in members:
                    pipe.hmget(keys.model(member.decode().split(":", 1)[1]), _MODEL_FIELDS)
                rows = await pipe.execute()
            for i, (member, row) in enumerate(zip(members, rows, strict=True)):
                record = _model_record(*row)
                if record is None or (tenant and record.model.tenant != tenant):
                    continue
                page.append(record.model)
                if len(page) == page_size:
                    more = i + 1 < len(members) or await self._model_after(member.decode())
                    return page, member.decode() if more else ""
            if len(members) < _SCAN_CHUNK:
                return page, ""
            after = members[-1].decode()

    async def _model_after(self, member: str) -> bool:
        return bool(await self.redis.zrange(keys.models_by_time(), f"({member}", "-", desc=True, bylex=True, offset=0,
                                            num=1))

    async def list_versions(self, model_id: str, page_size: int, below: int | None) -> tuple[list[model_pb2.ModelVersion], int]:
        """Newest first, numbers below `below` (None for the first page). Returns the page and
        the number of its last version (0 on the last page)."""
        top = f"({below}" if below is not None else "+inf"
        numbers = await self.redis.zrevrangebyscore(keys.versions(model_id), top, "-inf", start=0, num=page_size + 1)
        async with self.redis.pipeline(transaction=False) as pipe:
            for number in numbers[:page_size]:
                pipe.hmget(keys.version(model_id, int(number)), _VERSION_FIELDS)
            rows = await pipe.execute()
        page = [r.version for n, row in zip(numbers, rows, strict=False)
                if (r := _version_record(model_id, int(n), *row)) is not None]
        more = len(numbers) > page_size
        return page, int(numbers[page_size - 1]) if more else 0

    async def changes_after(self, model_id: str, number: int, after: str,
                            block_ms: int) -> list[tuple[str, model_pb2.ModelVersion]]:
        """Writes of a version after stream id `after` ("$" for only new ones), waiting up to block_ms."""
        streams = await self.redis.xread({keys.version_changes(model_id, number): after}, count=100, block=block_ms)
        found = []
        for entry_id, data in streams[0][1] if streams else []:
            version = model_pb2.ModelVersion.FromString(data[b"v"])
            version.name = version_name(model_id, number)
            found.append((entry_id.decode(), version))
        return found

    async def last_change(self, model_id: str, number: int) -> str:
        entries = await self.redis.xrevrange(keys.version_changes(model_id, number), count=1)
        return entries[0][0].decode() if entries else "0-0"

    # -- exports in flight ------------------------------------------------------------------

    async def active_exports(self) -> list[tuple[str, int]]:
        members = await self.redis.smembers(keys.active_exports())
        return [(m.rsplit("/", 1)[0], int(m.rsplit("/", 1)[1])) for m in (x.decode() for x in members)]

    async def renew_owner(self, owner: str, ttl_ms: int) -> None:
        await self.redis.set(keys.owner_lease(owner), "1", px=ttl_ms)

    async def release_owner(self, owner: str) -> None:
        await self.redis.delete(keys.owner_lease(owner))

    async def owner_alive(self, owner: str) -> bool:
        return bool(owner) and bool(await self.redis.exists(keys.owner_lease(owner)))


def _without_tenant(message: _Stored) -> _Stored:
    """A copy to store: the tenant lives in the hash, not in the proto."""
    stored = type(message)()
    stored.CopyFrom(message)
    stored.tenant = ""
    return stored


def _model_record(proto: bytes | None, gen: bytes | None, latest: bytes | None,
                  tenant: bytes | None) -> ModelRecord | None:
    if proto is None:
        return None
    model = model_pb2.Model.FromString(proto)
    model.latest_version = int(latest or 0)
    model.tenant = (tenant or b"").decode() or DEFAULT_TENANT
    return ModelRecord(model, int(gen or 0))


def _version_record(model_id: str, number: int, proto: bytes | None, gen: bytes | None,
                    owner: bytes | None, tenant: bytes | None, request_fp: bytes | None) -> VersionRecord | None:
    if proto is None:
        return None
    version = model_pb2.ModelVersion.FromString(proto)
    version.name = version_name(model_id, number)
    version.tenant = (tenant or b"").decode() or DEFAULT_TENANT
    return VersionRecord(version, int(gen or 0), (owner or b"").decode(), model_id, number, (request_fp or b"").decode())
