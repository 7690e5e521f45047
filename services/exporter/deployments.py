"""DeploymentManager: deployments as resources; every change returns at once and is reconciled.

Create, update and delete only record the desired state (DEPLOYING, UPDATING, DELETING) and
wake the reconciler (reconciler.py), which moves Ray Serve there and writes back what it
observes. Which versions may be served is checked here against the registry and again, in the
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
from paddleray.services.common import errors, identity, names, paging
from paddleray.services.exporter import convert, deployment_spec
from paddleray.services.exporter.deployment_store import DeploymentRecord, DeploymentStore, WriteResult
from paddleray.services.exporter.export_spec import MAX_REQUEST_ID
from paddleray.services.exporter.store import RegistryStore

D = deployment_pb2.DeploymentState
_OUTPUT_FIELDS = ("name", "model", "state", "state_reason", "endpoint", "version_statuses", "create_time", "update_time",
                  "tenant", "direct_endpoint")
_SCAN_CHUNK = 200
Live = Callable[[deployment_pb2.Deployment], Awaitable[deployment_pb2.Deployment]]
# Deployment id -> address of its own v2 endpoint (direct_ports.py), for those that have one.
DirectEndpoints = Callable[[], Awaitable[dict[str, str]]]


class DeploymentManager:
    def __init__(self, store: DeploymentStore, registry: RegistryStore, endpoint: str | Callable[[], str],
                 on_change: Callable[[], None] | None = None, live: Live | None = None,
                 direct_endpoints: DirectEndpoints | None = None) -> None:
        """endpoint: the v2 address shown on deployments, or a function giving it now (the port
        Serve's proxy really uses is known once Serve runs: ServingController.grpc_port)."""
        self.store = store
        self.registry = registry
        self._endpoint = endpoint if callable(endpoint) else (lambda: endpoint)
        self.on_change = on_change or (lambda: None)
        self.live = live
        self._direct_endpoints = direct_endpoints

    async def create(self, deployment_id: str, deployment: deployment_pb2.Deployment,
                     request_id: str) -> deployment_pb2.Deployment:
        identity.require_write("CreateDeployment")
        names.check_id(deployment_id, "deployment_id")
        if len(request_id) > MAX_REQUEST_ID:
            raise errors.InvalidArgument("request_id", f"must be at most {MAX_REQUEST_ID} characters")
        desired = deployment_pb2.Deployment()
        desired.CopyFrom(deployment)
        for field in _OUTPUT_FIELDS:
            desired.ClearField(field)
        desired.serving_name = desired.serving_name or deployment_id
        deployment_spec.check_serving_name(desired.serving_name)
        found = deployment_spec.validate(desired)
        desired.tenant = await self._check_versions(desired, found)
        now = time.time_ns()
        desired.name = names.DEPLOYMENT.format(deployment=deployment_id)
        desired.model = names.MODEL.format(model=found[0][0])
        desired.state = D.DEPLOYMENT_STATE_DEPLOYING
        desired.endpoint = self.endpoint
        desired.create_time.FromNanoseconds(now)
        desired.update_time.FromNanoseconds(now)
        result = await self.store.create(desired, found, request_id)
        if result.status == "duplicate" and result.record is not None:
            if not identity.visible(result.record.deployment.tenant):
                raise errors.AlreadyExists("request_id: already used by another request")
            return result.record.deployment
        await self._raise_failure(result, desired, found)
        self.on_change()
        return desired

    @property
    def endpoint(self) -> str:
        return self._endpoint()

    async def get(self, name: str) -> deployment_pb2.Deployment:
        record = await self._record(name)
        await self._show_endpoints([record.deployment])
        return await self.live(record.deployment) if self.live is not None else record.deployment

    async def _show_endpoints(self, deployments: list[deployment_pb2.Deployment]) -> None:
        direct = await self._direct_endpoints() if self._direct_endpoints is not None else {}
        for d in deployments:
            d.endpoint = self.endpoint
            d.direct_endpoint = direct.get(d.name.removeprefix("deployments/"), "")

    async def list_deployments(self, page_size: int, page_token: str, model: str, model_version: str,
                               tenant: str = "") -> tuple[list[deployment_pb2.Deployment], str]:
        if model:
            names.MODEL.parse(model, "model")
        if model_version:
            names.MODEL_VERSION.parse(model_version, "model_version")
        size = paging.page_size(page_size)
        filters = {"model": model, "model_version": model_version, **({"tenant": tenant} if tenant else {})}
        after = paging.decode_page_token(page_token, filters, "ListDeployments") or ""
        narrowed = identity.list_filter(tenant)
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

    async def update(self, deployment: deployment_pb2.Deployment,
                     mask: field_mask_pb2.FieldMask) -> deployment_pb2.Deployment:
        identity.require_write("UpdateDeployment")
        for _ in range(5):
            record = await self._record(deployment.name, "deployment.name")
            if record.deployment.state == D.DEPLOYMENT_STATE_DELETING:
                raise errors.FailedPrecondition(f"{deployment.name} is being deleted")
            merged = deployment_spec.merge(record.deployment, deployment, list(mask.paths))
            found = deployment_spec.validate(merged)
            await self._check_versions(merged, found, already_served=set(deployment_spec.targets(record.deployment)),
                                       tenant=record.deployment.tenant)
            merged.state = D.DEPLOYMENT_STATE_UPDATING
            merged.state_reason = ""
            merged.update_time.FromNanoseconds(time.time_ns())
            result = await self.store.update(record, merged, found, deployment_spec.targets(record.deployment))
            if result.status == "conflict":
                continue
            await self._raise_failure(result, merged, found)
            self.on_change()
            await self._show_endpoints([merged])
            return merged
        raise errors.Aborted(f"{deployment.name} kept changing; retry")

    async def delete(self, name: str) -> deployment_pb2.Deployment:
        identity.require_write("DeleteDeployment")
        for _ in range(5):
            record = await self._record(name)
            deleting = deployment_pb2.Deployment()
            deleting.CopyFrom(record.deployment)
            deleting.state = D.DEPLOYMENT_STATE_DELETING
            deleting.state_reason = ""
            deleting.update_time.FromNanoseconds(time.time_ns())
            if await self.store.write_status(record, deleting) is not None:
                self.on_change()
                return deleting
        raise errors.Aborted(f"{name} kept changing; retry")

    async def _record(self, name: str, field: str = "name") -> DeploymentRecord:
        deployment_id = names.DEPLOYMENT.parse_one(name, field)
        record = await self.store.get(deployment_id)
        if record is None or not identity.visible(record.deployment.tenant):
            raise errors.NotFound(f"{name} does not exist")
        return record

    async def _check_versions(self, desired: deployment_pb2.Deployment, found: list[tuple[str, int]],
                              already_served: Collection[tuple[str, int]] = frozenset(), tenant: str = "") -> str:
        """Checks that every target may be served by this caller (in `tenant`, when given);
        returns the targets' tenant."""
        for i, (model_id, number) in enumerate(found):
            where = f"deployment.traffic[{i}].model_version"
            record = await self.registry.get_version(model_id, number)
            if record is None or not identity.visible(record.version.tenant):
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

    async def _raise_failure(self, result: WriteResult, desired: deployment_pb2.Deployment,
                             found: list[tuple[str, int]]) -> None:
        if result.ok:
            return
        if result.status == "exists":
            raise errors.AlreadyExists(f"{desired.name} already exists")
        if result.status == "serving_name_taken":
            holder = await self.store.get(result.detail)
            if holder is not None and identity.visible(holder.deployment.tenant):
                raise errors.AlreadyExists(
                    f"serving_name {desired.serving_name!r} is taken by deployments/{result.detail}")
            # Serving names are one namespace on Ray Serve: say it is taken, not by which deployment.
            raise errors.AlreadyExists(f"serving_name {desired.serving_name!r} is taken; choose another")
        if result.status in ("version_missing", "version_not_ready"):
            model_id, number = found[result.index]
            where = f"deployment.traffic[{result.index}].model_version: models/{model_id}/versions/{number}"
            if result.status == "version_missing":
                raise errors.NotFound(f"{where} does not exist")
            raise errors.FailedPrecondition(f"{where} is no longer READY")
        if result.status == "missing":
            raise errors.NotFound(f"{desired.name} does not exist")
        raise errors.Aborted(f"{desired.name} changed meanwhile; retry")
