"""DeploymentStore: the desired state of every deployment (and its last observed status) in Redis.

A deployment is a hash (keys.deployment): `proto` is the serialized Deployment, `gen` is bumped
by every write (user changes and the reconciler's status writes compare-and-set on it),
`member` is its time-index entry, `serving_name` its unique v2 model name (also claimed in
keys.serving_names). Each version a deployment's traffic names holds the deployment's id in
keys.version_deployments, so that the version cannot be deleted while it is served; the
scripts that write a deployment move those references in the same step.

A deployment's tenant is Deployment.tenant in its proto (the tenant of the model it serves);
the create and update scripts refuse versions of another tenant as missing. Deployments
recorded before tenants existed have none: they are DEFAULT_TENANT's (filled in on read).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import redis.asyncio as aioredis

from paddleray.exporter.v1 import deployment_pb2, model_pb2
from paddleray.services.common.identity import DEFAULT_TENANT
from paddleray.services.exporter import keys
from paddleray.services.exporter.store import script

_READY = model_pb2.MODEL_VERSION_STATE_READY


@dataclass
class DeploymentRecord:
    deployment: deployment_pb2.Deployment
    gen: int

    @property
    def deployment_id(self) -> str:
        return self.deployment.name.removeprefix("deployments/")


@dataclass
class WriteResult:
    """status: ok, duplicate, exists, serving_name_taken, version_missing, version_not_ready,
    conflict, missing. index: the traffic target (from 0) a version_* status is about."""

    status: str
    gen: int = 0
    index: int = -1
    detail: str = ""
    record: DeploymentRecord | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def version_keys(deployment: deployment_pb2.Deployment, targets: list[tuple[str, int]]) -> tuple[list[str], list[str]]:
    """The version hashes and the version deployments sets of (model_id, number) targets."""
    return ([keys.version(m, n) for m, n in targets], [keys.version_deployments(m, n) for m, n in targets])


class DeploymentStore:
    def __init__(self, client: aioredis.Redis, request_ttl_s: int = 24 * 3600) -> None:
        self.redis = client
        self.request_ttl_s = request_ttl_s
        self._create = client.register_script(script("create_deployment.lua"))
        self._update = client.register_script(script("update_deployment.lua"))
        self._remove = client.register_script(script("remove_deployment.lua"))
        self._cas = client.register_script(script("cas_write.lua"))

    async def installation_id(self) -> str:
        """This installation's id, made by the first replica that asks (serving/ownership.py)."""
        await self.redis.set(keys.installation(), uuid.uuid4().hex, nx=True)
        return (await self.redis.get(keys.installation())).decode()

    async def create(
        self, deployment: deployment_pb2.Deployment, targets: list[tuple[str, int]], request_id: str
    ) -> WriteResult:
        deployment_id = deployment.name.removeprefix("deployments/")
        member = f"{deployment.create_time.ToMilliseconds():015d}:{deployment_id}"
        version_hashes, version_sets = version_keys(deployment, targets)
        result = await self._create(
            keys=[keys.deployment_request(request_id), keys.deployment(deployment_id), keys.deployments_by_time(),
                  keys.serving_names(), *version_hashes, *version_sets],
            args=[deployment_id, deployment.SerializeToString(), member, deployment.serving_name, self.request_ttl_s,
                  "1" if request_id else "0", keys.deployment_prefix(), len(targets), _READY,
                  deployment.tenant or DEFAULT_TENANT],
        )
        status = result[0].decode()
        if status == "created":
            return WriteResult("ok", 1, record=DeploymentRecord(deployment, 1))
        if status == "duplicate":
            first = deployment_pb2.Deployment.FromString(result[1])
            return WriteResult(status, record=await self.get(first.name.removeprefix("deployments/")))
        return _failure(status, result)

    async def get(self, deployment_id: str) -> DeploymentRecord | None:
        proto, gen = await self.redis.hmget(keys.deployment(deployment_id), ("proto", "gen"))
        if proto is None:
            return None
        return DeploymentRecord(_deployment(proto), int(gen))

    async def update(
        self, record: DeploymentRecord, deployment: deployment_pb2.Deployment, targets: list[tuple[str, int]],
        previous: list[tuple[str, int]],
    ) -> WriteResult:
        """Writes a changed desired state, moving version references from `previous` to `targets`."""
        version_hashes, version_sets = version_keys(deployment, targets)
        _, old_sets = version_keys(deployment, previous)
        result = await self._update(
            keys=[keys.deployment(record.deployment_id), *version_hashes, *version_sets, *old_sets],
            args=[record.gen, deployment.SerializeToString(), record.deployment_id, len(targets), _READY,
                  deployment.tenant or DEFAULT_TENANT],
        )
        if result[0] == b"ok":
            gen = int(result[1])
            return WriteResult("ok", gen, record=DeploymentRecord(deployment, gen))
        return _failure(result[0].decode(), result)

    async def write_status(self, record: DeploymentRecord, deployment: deployment_pb2.Deployment) -> int | None:
        """The reconciler's write of observed state; None when a user change came in between."""
        result = await self._cas(keys=[keys.deployment(record.deployment_id)],
                                 args=[record.gen, "proto", deployment.SerializeToString()])
        return int(result[1]) if result[0] == b"ok" else None

    async def remove(self, record: DeploymentRecord, served: list[tuple[str, int]]) -> bool:
        _, version_sets = version_keys(record.deployment, served)
        result = await self._remove(
            keys=[keys.deployment(record.deployment_id), keys.deployments_by_time(), keys.serving_names(),
                  *version_sets],
            args=[record.deployment_id, record.gen],
        )
        return result[0] == b"removed"

    async def all(self) -> list[DeploymentRecord]:
        """Every deployment, newest first (the reconciler applies all of them at once)."""
        members = await self.redis.zrange(keys.deployments_by_time(), "+", "-", desc=True, bylex=True)
        return await self._records(members)

    async def scan(self, count: int, after: str) -> tuple[list[tuple[DeploymentRecord, str]], bool]:
        """Up to `count` deployments after index member `after` ("" from the newest), newest
        first, each with its index member; and whether the index may hold more."""
        start = f"({after}" if after else "+"
        members = await self.redis.zrange(keys.deployments_by_time(), start, "-", desc=True, bylex=True, offset=0,
                                          num=count)
        records = await self._records(members, keep_missing=True)
        found = [(r, m.decode()) for r, m in zip(records, members, strict=True) if r is not None]
        return found, len(members) == count

    async def _records(self, members: list[bytes], keep_missing: bool = False) -> list:
        async with self.redis.pipeline(transaction=False) as pipe:
            for member in members:
                pipe.hmget(keys.deployment(member.decode().split(":", 1)[1]), ("proto", "gen"))
            rows = await pipe.execute()
        records = [DeploymentRecord(_deployment(p), int(g)) if p is not None else None for p, g in rows]
        return records if keep_missing else [r for r in records if r is not None]


def _deployment(proto: bytes) -> deployment_pb2.Deployment:
    deployment = deployment_pb2.Deployment.FromString(proto)
    deployment.tenant = deployment.tenant or DEFAULT_TENANT
    return deployment


def _failure(status: str, result: list) -> WriteResult:
    if status in ("version_missing", "version_not_ready"):
        return WriteResult(status, index=int(result[1]) - 1, detail=result[2].decode() if len(result) > 2 else "")
    if status == "serving_name_taken":
        return WriteResult(status, detail=result[1].decode())
    return WriteResult(status)
