"""Runs in: the exporter process.

DeploymentStore: every deployment in Redis, as two parts with one writer each.

The user's part, the spec (what CreateDeployment / UpdateDeployment / DeleteDeployment asked
for), is written only through `SpecWriter` (DeploymentManager's): `proto` is the spec, its
`state` the user's intent (SPEC_STATES: DEPLOYING, UPDATING, DELETING), and `gen` its
generation, bumped by every spec write. The reconciler's part is written only through
`StatusWriter`: `status` (the observed state, STATUS_STATES, its reason and each version's
replicas), `observed_gen` (the spec generation it observed) and `applied_gen` (the spec
generation whose apply to Serve returned), in a script that touches no spec field. So neither
overwrites the other, and neither needs to retry on the other's writes: a status of an older
generation than the spec is kept (its replica counts are still true) while the state shown is
the new spec's intent. The state a reader sees is computed (`DeploymentRecord.deployment`):
DELETING if asked; else the reconciler's observation of this very generation; else the intent.
tests/unit/exporter/test_deployment_writers.py checks that each part has one writer.

A record written before the split holds one proto with both parts (its state possibly
HEALTHY / UNHEALTHY, written by the old reconciler): it is read as a spec whose status is that
observation of the current generation, so a running stack's Redis keeps working.

`member` is the deployment's time-index entry, `serving_name` its unique v2 model name (also
claimed in keys.serving_names). Each version a deployment's traffic names holds the
deployment's id in keys.version_deployments, so that the version cannot be deleted while it is
served; the scripts that write a spec move those references in the same step.

A deployment's tenant is Deployment.tenant in its spec (the tenant of the model it serves);
the create and update scripts refuse versions of another tenant as missing. Deployments
recorded before tenants existed have none: they are DEFAULT_TENANT's (filled in on read).
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from dataclasses import dataclass, replace
from enum import StrEnum

import redis.asyncio as aioredis

from paddleray.exporter.v1 import deployment_pb2, model_pb2
from paddleray.services.common import names
from paddleray.services.common.identity import DEFAULT_TENANT
from paddleray.services.exporter.store import keys
from paddleray.services.exporter.store.registry_store import script

_READY = model_pb2.MODEL_VERSION_STATE_READY
D = deployment_pb2.DeploymentState
# The states each party may write: the user's intent, and what the reconciler observes.
SPEC_STATES = frozenset({D.DEPLOYMENT_STATE_DEPLOYING, D.DEPLOYMENT_STATE_UPDATING, D.DEPLOYMENT_STATE_DELETING})
STATUS_STATES = frozenset({D.DEPLOYMENT_STATE_DEPLOYING, D.DEPLOYMENT_STATE_UPDATING, D.DEPLOYMENT_STATE_HEALTHY,
                           D.DEPLOYMENT_STATE_UNHEALTHY})
# The reconciler's fields of a Deployment; every other field is the spec's (or computed on read).
STATUS_FIELDS = ("state", "state_reason", "version_statuses")
_LEGACY_OBSERVED = frozenset({D.DEPLOYMENT_STATE_HEALTHY, D.DEPLOYMENT_STATE_UNHEALTHY})


class WriteStatus(StrEnum):
    OK = "ok"
    DUPLICATE = "duplicate"
    EXISTS = "exists"
    SERVING_NAME_TAKEN = "serving_name_taken"
    VERSION_MISSING = "version_missing"
    VERSION_NOT_READY = "version_not_ready"
    CONFLICT = "conflict"
    MISSING = "missing"


@dataclass
class DeploymentRecord:
    """A stored deployment: the spec at generation `gen`, and the reconciler's status of
    generation `observed_gen` (None before its first observation)."""

    spec: deployment_pb2.Deployment
    gen: int
    status: deployment_pb2.Deployment | None = None
    observed_gen: int = 0
    applied_gen: int = 0  # the spec generation whose apply to Serve returned (0: none yet)

    @property
    def deployment_id(self) -> str:
        return names.DEPLOYMENT.parse_one(self.spec.name)

    @functools.cached_property
    def deployment(self) -> deployment_pb2.Deployment:
        """The deployment as shown (computed once per record): the spec, the status's version statuses, and the state
        computed from both (DELETING if asked; the observation of this generation; else the
        intent)."""
        shown = deployment_pb2.Deployment()
        shown.CopyFrom(self.spec)
        if self.status is not None:
            shown.version_statuses.extend(self.status.version_statuses)
            if self.spec.state != D.DEPLOYMENT_STATE_DELETING and self.observed_gen == self.gen:
                shown.state, shown.state_reason = self.status.state, self.status.state_reason
        return shown

    @property
    def applied(self) -> bool:
        """Whether Serve was given this generation of the spec (an apply of it returned)."""
        return self.applied_gen == self.gen


@dataclass
class WriteResult:
    """index: the traffic target (from 0) a version_* status is about. detail of a duplicate:
    the fingerprint of the request that created it (common/idempotency.py)."""

    status: WriteStatus
    gen: int = 0
    index: int = -1
    detail: str = ""
    record: DeploymentRecord | None = None

    @property
    def ok(self) -> bool:
        return self.status == WriteStatus.OK


def version_keys(deployment: deployment_pb2.Deployment, targets: list[tuple[str, int]]) -> tuple[list[str], list[str]]:
    """The version hashes and the version deployments sets of (model_id, number) targets."""
    return ([keys.version(m, n) for m, n in targets], [keys.version_deployments(m, n) for m, n in targets])


def spec_of(deployment: deployment_pb2.Deployment) -> deployment_pb2.Deployment:
    """The spec part of a deployment: its status fields cleared."""
    spec = deployment_pb2.Deployment()
    spec.CopyFrom(deployment)
    spec.ClearField("state_reason")
    spec.ClearField("version_statuses")
    return spec


def status_of(deployment: deployment_pb2.Deployment) -> deployment_pb2.Deployment:
    """The status part of a deployment: state, state_reason and version_statuses only."""
    status = deployment_pb2.Deployment(state=deployment.state, state_reason=deployment.state_reason)
    status.version_statuses.extend(deployment.version_statuses)
    return status


class DeploymentStore:
    """Reads; the writes are `spec_writer` (DeploymentManager's) and `status_writer` (the
    Reconciler's). Reading and the store guard's keys are shared."""

    def __init__(self, client: aioredis.Redis, request_ttl_s: int = 24 * 3600) -> None:
        self.redis = client
        self.request_ttl_s = request_ttl_s
        self.spec_writer = SpecWriter(self)
        self.status_writer = StatusWriter(self)

    async def installation_id(self) -> str:
        """This installation's id, made by the first replica that asks (serving/control/ownership.py)."""
        await self.redis.set(keys.installation(), uuid.uuid4().hex, nx=True)
        return (await self.redis.get(keys.installation())).decode()

    async def installation_marker(self) -> str | None:
        """The installation id if the store holds one (nothing is made here)."""
        value = await self.redis.get(keys.installation())
        return value.decode() if value is not None else None

    async def store_lost(self) -> dict | None:
        """Why the store looks lost (store_guard.py), while it does."""
        value = await self.redis.get(keys.store_lost())
        try:
            found = json.loads(value) if value is not None else None
        except ValueError:
            return {"reason": "the store-lost record does not parse", "installation": ""}
        return found if isinstance(found, dict) else None

    async def record_store_lost(self, installation: str, reason: str) -> None:
        record = {"installation": installation, "reason": reason, "since": time.time()}
        await self.redis.set(keys.store_lost(), json.dumps(record), nx=True)

    async def loss_confirmed(self) -> bool:
        return bool(await self.redis.exists(keys.store_loss_confirmed()))

    async def confirm_store_loss(self, installation: str) -> None:
        """An operator's confirmation: this store's desired state is meant, under installation."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(keys.installation(), installation)
            pipe.set(keys.store_loss_confirmed(), str(time.time()))
            pipe.delete(keys.store_lost())
            await pipe.execute()

    async def consume_loss_confirmation(self) -> None:
        await self.redis.delete(keys.store_loss_confirmed())

    async def get(self, deployment_id: str) -> DeploymentRecord | None:
        return _record(await self.redis.hmget(keys.deployment(deployment_id), _FIELDS))

    async def applied_fingerprint(self) -> str:
        """What StatusWriter.record_applied recorded last ("" before any apply)."""
        value = await self.redis.get(keys.deployments_applied())
        return value.decode() if value is not None else ""

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
                pipe.hmget(keys.deployment(member.decode().split(":", 1)[1]), _FIELDS)
            rows = await pipe.execute()
        records = [_record(row) for row in rows]
        return records if keep_missing else [r for r in records if r is not None]


class SpecWriter:
    """The user's part: create, update and mark deleting. Only DeploymentManager writes through
    it (tests/unit/exporter/test_deployment_writers.py); its scripts set no status field."""

    def __init__(self, store: DeploymentStore) -> None:
        client = store.redis
        self._store = store
        self._create = client.register_script(script("create_deployment.lua"))
        self._update = client.register_script(script("update_deployment.lua"))
        self._cas = client.register_script(script("cas_write.lua"))

    async def create(
        self, deployment: deployment_pb2.Deployment, targets: list[tuple[str, int]], request_id: str,
        fingerprint: str = "",
    ) -> WriteResult:
        spec = _checked_spec(deployment)
        deployment_id = names.DEPLOYMENT.parse_one(spec.name)
        member = f"{spec.create_time.ToMilliseconds():015d}:{deployment_id}"
        version_hashes, version_sets = version_keys(spec, targets)
        result = await self._create(
            keys=[keys.deployment_request(request_id), keys.deployment(deployment_id), keys.deployments_by_time(),
                  keys.serving_names(), *version_hashes, *version_sets],
            args=[deployment_id, spec.SerializeToString(), member, spec.serving_name, self._store.request_ttl_s,
                  "1" if request_id else "0", keys.deployment_prefix(), len(targets), _READY,
                  spec.tenant or DEFAULT_TENANT, fingerprint],
        )
        status = result[0].decode()
        if status == "created":
            return WriteResult(WriteStatus.OK, 1, record=DeploymentRecord(spec, 1))
        if status == WriteStatus.DUPLICATE:
            first = deployment_pb2.Deployment.FromString(result[1])
            return WriteResult(WriteStatus.DUPLICATE, detail=result[2].decode(),
                               record=await self._store.get(names.DEPLOYMENT.parse_one(first.name)))
        return _failure(status, result)

    async def update(
        self, record: DeploymentRecord, deployment: deployment_pb2.Deployment, targets: list[tuple[str, int]],
        previous: list[tuple[str, int]],
    ) -> WriteResult:
        """Writes a changed spec (the next generation), moving version references from
        `previous` to `targets`; CONFLICT when the spec changed since `record` was read."""
        spec = _checked_spec(deployment)
        version_hashes, version_sets = version_keys(spec, targets)
        _, old_sets = version_keys(spec, previous)
        result = await self._update(
            keys=[keys.deployment(record.deployment_id), *version_hashes, *version_sets, *old_sets],
            args=[record.gen, spec.SerializeToString(), record.deployment_id, len(targets), _READY,
                  spec.tenant or DEFAULT_TENANT],
        )
        if result[0] == b"ok":
            gen = int(result[1])
            return WriteResult(WriteStatus.OK, gen, record=replace(record, spec=spec, gen=gen))
        return _failure(result[0].decode(), result)

    async def mark_deleting(self, record: DeploymentRecord, update_time_ns: int) -> DeploymentRecord | None:
        """The spec asks for deletion (the reconciler removes the deployment once Serve no longer
        serves it); None when the spec changed since `record` was read."""
        spec = spec_of(record.spec)
        spec.state = D.DEPLOYMENT_STATE_DELETING
        spec.update_time.FromNanoseconds(update_time_ns)
        result = await self._cas(keys=[keys.deployment(record.deployment_id)],
                                 args=[record.gen, "proto", spec.SerializeToString()])
        return replace(record, spec=spec, gen=int(result[1])) if result[0] == b"ok" else None


class StatusWriter:
    """The reconciler's part: observed status, applied generation, removal once deleted. Only
    the Reconciler writes through it; its script sets no spec field."""

    def __init__(self, store: DeploymentStore) -> None:
        client = store.redis
        self._store = store
        self._status = client.register_script(script("write_deployment_status.lua"))
        self._remove = client.register_script(script("remove_deployment.lua"))

    async def write(self, record: DeploymentRecord, observed: deployment_pb2.Deployment,
                    applied: bool | None = None) -> bool:
        """Records what was observed of spec generation record.gen, and `applied`: True, an
        apply of that generation returned; False, nothing applied survives (a lost cluster);
        None, as recorded. False when the deployment is gone or a later observation is stored."""
        if observed.state not in STATUS_STATES:
            raise ValueError(f"the reconciler does not write {D.Name(observed.state)}: the user's intent is the spec's")
        result = await self._status(keys=[keys.deployment(record.deployment_id)],
                                    args=[record.gen, status_of(observed).SerializeToString(),
                                          "" if applied is None else str(record.gen if applied else 0)])
        return result[0] == b"ok"

    async def record_applied(self, fingerprint: str) -> None:
        """The served state Serve was last given (DeploymentStore.applied_fingerprint)."""
        await self._store.redis.set(keys.deployments_applied(), fingerprint)

    async def remove(self, record: DeploymentRecord, served: list[tuple[str, int]]) -> bool:
        """Removes a DELETING deployment whose replicas are gone, unless its spec changed since."""
        _, version_sets = version_keys(record.spec, served)
        result = await self._remove(
            keys=[keys.deployment(record.deployment_id), keys.deployments_by_time(), keys.serving_names(),
                  *version_sets],
            args=[record.deployment_id, record.gen],
        )
        return result[0] == b"removed"


_FIELDS = ("proto", "gen", "status", "observed_gen", "applied_gen")


def _checked_spec(deployment: deployment_pb2.Deployment) -> deployment_pb2.Deployment:
    if deployment.state not in SPEC_STATES:
        raise ValueError(f"a spec does not say {D.Name(deployment.state)}: that is the reconciler's to observe")
    return spec_of(deployment)


def _record(row: list) -> DeploymentRecord | None:
    proto, gen, status, observed_gen, applied_gen = row
    if proto is None:
        return None
    stored = deployment_pb2.Deployment.FromString(proto)
    stored.tenant = stored.tenant or DEFAULT_TENANT
    if status is not None:
        return DeploymentRecord(stored, int(gen), deployment_pb2.Deployment.FromString(status), int(observed_gen or 0),
                                int(applied_gen or 0))
    # Before the split (or before the first observation): one proto. Its status fields are an
    # observation of this generation when the old reconciler wrote its state, and HEALTHY said
    # that an apply of this spec had returned.
    legacy = status_of(stored)
    spec = spec_of(stored)
    if stored.state in _LEGACY_OBSERVED:
        spec.state = D.DEPLOYMENT_STATE_UPDATING
        applied = int(gen) if stored.state == D.DEPLOYMENT_STATE_HEALTHY else 0
        return DeploymentRecord(spec, int(gen), legacy, int(gen), applied)
    return DeploymentRecord(spec, int(gen), legacy if stored.version_statuses else None)


def _failure(status: str, result: list) -> WriteResult:
    kind = WriteStatus(status)
    if kind in (WriteStatus.VERSION_MISSING, WriteStatus.VERSION_NOT_READY):
        return WriteResult(kind, index=int(result[1]) - 1, detail=result[2].decode() if len(result) > 2 else "")
    if kind == WriteStatus.SERVING_NAME_TAKEN:
        return WriteResult(kind, detail=result[1].decode())
    return WriteResult(kind)
