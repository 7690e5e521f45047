"""Runs in: the exporter process.

DeploymentManager: deployments as resources; every change returns at once and is reconciled.

Create, update and delete only record the spec, the user's part of a deployment, whose state
is the intent (DEPLOYING, UPDATING, DELETING), through the store's SpecWriter, and wake the
reconciler (reconciler.py), which moves Ray Serve there and records what it observes in the
status, a part of its own (deployment_store.py): neither writes the other's. Which versions may be served is checked here against the registry and again, in the
same step as the write, by the Lua scripts (a version must be READY when it is first served).

Tenants (common.identity): a deployment is the tenant's of the model it serves, and serves
only that tenant's versions (checked here and again by the scripts). Another tenant's
deployment or version answers NOT_FOUND as if absent; lists hold the caller's tenant's.
Serving names are one namespace on Ray Serve: a name another tenant holds is ALREADY_EXISTS
without naming the deployment that holds it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection

from google.protobuf import field_mask_pb2

from paddleray.exporter.v1 import deployment_pb2, model_pb2
from paddleray.services.common import errors, idempotency, identity, names, paging
from paddleray.services.common.identity import Identity
from paddleray.services.exporter.deploy import capacity, deployment_spec
from paddleray.services.exporter.registry import convert
from paddleray.services.exporter.store.deployment_store import (
    DeploymentRecord,
    DeploymentStore,
    WriteResult,
    WriteStatus,
)
from paddleray.services.exporter.store.registry_store import RegistryStore

D = deployment_pb2.DeploymentState
_OUTPUT_FIELDS = ("name", "model", "state", "state_reason", "endpoint", "version_statuses", "create_time", "update_time",
                  "tenant", "direct_endpoint", "http_endpoint")
_SCAN_CHUNK = 200
Live = Callable[[DeploymentRecord], Awaitable[deployment_pb2.Deployment]]
NodeTotals = Callable[[], Awaitable[list[dict[str, float]] | None]]
# Changes of these paths can make a deployment need more than the cluster has.
_DEMAND_PATHS = ("num_replicas", "autoscaling", "resources_per_replica")
# Serving name -> the base URL of its v2 REST API.
HttpEndpoint = Callable[[str], str]


class DeploymentManager:
    def __init__(self, store: DeploymentStore, registry: RegistryStore, endpoint: str | Callable[[], str],
                 on_change: Callable[[], None] | None = None, live: Live | None = None,
                 http_endpoint: HttpEndpoint | None = None,
                 before_change: Callable[[], Awaitable[None]] | None = None,
                 node_totals: NodeTotals | None = None) -> None:
        """endpoint: the v2 gRPC address shown on deployments, or a function giving it now (the
        port Serve's HAProxy really uses is known once Serve runs: ServingController.grpc_port);
        http_endpoint: the base URL of a serving name's v2 REST API.
        before_change: may refuse every change (the store guard, while the store looks lost).
        node_totals: the Ray nodes' total resources now (None: unknown), to refuse what never fits."""
        self.store = store
        self._specs = store.spec_writer  # the one writer of the user's part
        self.registry = registry
        self._endpoint = endpoint if callable(endpoint) else (lambda: endpoint)
        self.on_change = on_change or (lambda: None)
        self.live = live
        self._http_endpoint = http_endpoint
        self._before_change = before_change
        self._node_totals = node_totals

    async def create(self, caller: Identity, deployment_id: str, deployment: deployment_pb2.Deployment,
                     request_id: str) -> deployment_pb2.Deployment:
        identity.require_write(caller, "CreateDeployment")
        if self._before_change is not None:
            await self._before_change()
        names.check_id(deployment_id, "deployment_id")
        idempotency.check_request_id(request_id)
        desired = deployment_pb2.Deployment()
        desired.CopyFrom(deployment)
        for field in _OUTPUT_FIELDS:
            desired.ClearField(field)
        # What a repeated request_id must repeat: the request as sent, by the caller's tenant.
        fingerprint = idempotency.fingerprint(desired, deployment_id, caller.tenant)
        desired.serving_name = desired.serving_name or deployment_id
        deployment_spec.check_serving_name(desired.serving_name)
        found = deployment_spec.validate(desired)
        desired.tenant = await self._check_versions(caller, desired, found)
        await self._check_fits(desired)
        now = time.time_ns()
        desired.name = names.DEPLOYMENT.format(deployment=deployment_id)
        desired.model = names.MODEL.format(model=found[0][0])
        desired.state = D.DEPLOYMENT_STATE_DEPLOYING
        desired.endpoint = self.endpoint
        desired.create_time.FromNanoseconds(now)
        desired.update_time.FromNanoseconds(now)
        result = await self._specs.create(desired, found, request_id, fingerprint)
        if result.status == WriteStatus.DUPLICATE and result.record is not None:
            if not identity.visible(caller, result.record.deployment.tenant):
                raise idempotency.reused()
            idempotency.check_repeat(result.detail, fingerprint)
            return result.record.deployment
        await self._raise_failure(caller, result, desired, found)
        self.on_change()
        return desired

    @property
    def endpoint(self) -> str:
        return self._endpoint()

    async def get(self, caller: Identity, name: str) -> deployment_pb2.Deployment:
        record = await self._record(caller, name)
        await self._show_endpoints([record.deployment])
        return await self.live(record) if self.live is not None else record.deployment

    async def _show_endpoints(self, deployments: list[deployment_pb2.Deployment]) -> None:
        for d in deployments:
            d.endpoint = self.endpoint
            d.http_endpoint = self._http_endpoint(d.serving_name) if self._http_endpoint is not None else ""
            d.ClearField("direct_endpoint")

    async def list_deployments(self, caller: Identity, page_size: int, page_token: str, model: str, model_version: str,
                               tenant: str = "") -> tuple[list[deployment_pb2.Deployment], str]:
        if model:
            names.MODEL.parse(model, "model")
        if model_version:
            names.MODEL_VERSION.parse(model_version, "model_version")
        size = paging.page_size(page_size)
        filters = {"model": model, "model_version": model_version, **({"tenant": tenant} if tenant else {})}
        after = paging.decode_page_token(page_token, filters, "ListDeployments") or ""
        narrowed = identity.list_filter(caller, tenant)
        if narrowed is None:
            return [], ""
        page: list[deployment_pb2.Deployment] = []
        while True:
            found, more = await self.store.scan(_SCAN_CHUNK, after)
            for record, member in found:
                d = record.deployment
                if (narrowed and d.tenant != narrowed) or (model and d.model != model) or (model_version and all(
                        t.model_version != model_version for t in d.traffic)):
                    continue
                page.append(d)
                if len(page) == size:
                    await self._show_endpoints(page)
                    return page, paging.encode_page_token(member, filters)
            if not more or not found:
                await self._show_endpoints(page)
                return page, ""
            after = found[-1][1]

    async def update(self, caller: Identity, deployment: deployment_pb2.Deployment,
                     mask: field_mask_pb2.FieldMask) -> deployment_pb2.Deployment:
        identity.require_write(caller, "UpdateDeployment")
        if self._before_change is not None:
            await self._before_change()
        for _ in range(5):
            record = await self._record(caller, deployment.name, "deployment.name")
            if record.deployment.state == D.DEPLOYMENT_STATE_DELETING:
                raise errors.FailedPrecondition(f"{deployment.name} is being deleted")
            merged = deployment_spec.merge(record.deployment, deployment, list(mask.paths))
            found = deployment_spec.validate(merged)
            await self._check_versions(caller, merged, found, already_served=set(deployment_spec.targets(record.deployment)),
                                       tenant=record.deployment.tenant)
            if not mask.paths or any(path.split(".")[0] in _DEMAND_PATHS for path in mask.paths):
                await self._check_fits(merged)
            merged.state = D.DEPLOYMENT_STATE_UPDATING
            merged.state_reason = ""
            merged.update_time.FromNanoseconds(time.time_ns())
            result = await self._specs.update(record, merged, found, deployment_spec.targets(record.deployment))
            if result.status == WriteStatus.CONFLICT:
                continue
            await self._raise_failure(caller, result, merged, found)
            self.on_change()
            await self._show_endpoints([merged])
            return merged
        raise errors.Aborted(f"{deployment.name} kept changing; retry")

    async def delete(self, caller: Identity, name: str) -> deployment_pb2.Deployment:
        identity.require_write(caller, "DeleteDeployment")
        if self._before_change is not None:
            await self._before_change()
        for _ in range(5):
            record = await self._record(caller, name)
            deleting = await self._specs.mark_deleting(record, time.time_ns())
            if deleting is not None:
                self.on_change()
                return deleting.deployment
        raise errors.Aborted(f"{name} kept changing; retry")

    async def _check_fits(self, desired: deployment_pb2.Deployment) -> None:
        """FAILED_PRECONDITION for replicas that the whole (empty) cluster could not place."""
        if self._node_totals is None:
            return
        reason = capacity.never_fits(desired, await self._node_totals())
        if reason:
            raise errors.FailedPrecondition(f"deployment.resources_per_replica: {reason}")

    async def _record(self, caller: Identity, name: str, field: str = "name") -> DeploymentRecord:
        deployment_id = names.DEPLOYMENT.parse_one(name, field)
        record = await self.store.get(deployment_id)
        if record is None or not identity.visible(caller, record.deployment.tenant):
            raise errors.NotFound(f"{name} does not exist")
        return record

    async def _check_versions(self, caller: Identity, desired: deployment_pb2.Deployment, found: list[tuple[str, int]],
                              already_served: Collection[tuple[str, int]] = frozenset(), tenant: str = "") -> str:
        """Checks that every target may be served by this caller (in `tenant`, when given);
        returns the targets' tenant."""
        for i, (model_id, number) in enumerate(found):
            where = f"deployment.traffic[{i}].model_version"
            record = await self.registry.get_version(model_id, number)
            if record is None or not identity.visible(caller, record.version.tenant):
                raise errors.NotFound(f"{where}: models/{model_id}/versions/{number} does not exist")
            version = record.version
            tenant = tenant or version.tenant
            if version.tenant != tenant:  # an admin's change: the caller may see both tenants
                raise errors.InvalidArgument(where, f"{version.name} is tenant {version.tenant!r}'s; this deployment "
                                                    f"serves only tenant {tenant!r}'s models")
            if version.state != model_pb2.MODEL_VERSION_STATE_READY and (model_id, number) not in already_served:
                state = model_pb2.ModelVersionState.Name(version.state)
                raise errors.FailedPrecondition(f"{where}: {version.name} is {state}; only READY versions can be served"
                                                + (f" ({version.state_reason})" if version.state_reason else ""))
            validated = [b.backend for b in convert.validated_backends(version)]
            if desired.backend and desired.backend not in validated:
                raise errors.FailedPrecondition(
                    f"{where}: {version.name} was not exported and validated for {model_pb2.Backend.Name(desired.backend)}")
            if not validated:
                raise errors.FailedPrecondition(f"{where}: {version.name} has no validated backend")
        return tenant

    async def _raise_failure(self, caller: Identity, result: WriteResult, desired: deployment_pb2.Deployment,
                             found: list[tuple[str, int]]) -> None:
        if result.ok:
            return
        if result.status == WriteStatus.EXISTS:
            raise errors.AlreadyExists(f"{desired.name} already exists")
        if result.status == WriteStatus.SERVING_NAME_TAKEN:
            holder = await self.store.get(result.detail)
            if holder is not None and identity.visible(caller, holder.deployment.tenant):
                raise errors.AlreadyExists(
                    f"serving_name {desired.serving_name!r} is taken by deployments/{result.detail}")
            # Serving names are one namespace on Ray Serve: say it is taken, not by which deployment.
            raise errors.AlreadyExists(f"serving_name {desired.serving_name!r} is taken; choose another")
        if result.status in (WriteStatus.VERSION_MISSING, WriteStatus.VERSION_NOT_READY):
            model_id, number = found[result.index]
            where = f"deployment.traffic[{result.index}].model_version: models/{model_id}/versions/{number}"
            if result.status == WriteStatus.VERSION_MISSING:
                raise errors.NotFound(f"{where} does not exist")
            raise errors.FailedPrecondition(f"{where} is no longer READY")
        if result.status == WriteStatus.MISSING:
            raise errors.NotFound(f"{desired.name} does not exist")
        raise errors.Aborted(f"{desired.name} changed meanwhile; retry")
