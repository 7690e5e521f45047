"""Tenants in the exporter's Redis records: set at create, checked by the scripts that write,
and "default" for records written before tenants existed."""

from __future__ import annotations

import inspect

import pytest
from google.protobuf import field_mask_pb2

from paddleray.exporter.v1 import deployment_pb2, model_pb2
from paddleray.exporter.v1 import exporter_service_pb2 as es
from paddleray.services.common import errors, identity
from paddleray.services.common.identity import Identity, Role
from paddleray.services.exporter.deploy.deployments import DeploymentManager
from paddleray.services.exporter.export.exports import ExportManager
from paddleray.services.exporter.registry.models import ModelRegistry
from paddleray.services.exporter.servicer import ExporterServicer
from paddleray.services.exporter.store import keys
from paddleray.services.exporter.store.registry_store import OtherTenantsModel
from support.exporter import new_model, new_version, ready_version

pytestmark = pytest.mark.unit
MEMBER_A = Identity("team-a", Role.MEMBER)
MEMBER_B = Identity("team-b", Role.MEMBER)
ADMIN = Identity("ops", Role.ADMIN)


async def test_a_model_keeps_the_tenant_of_its_first_version(store, raw_redis):
    _, first = await store.create_version(new_model("digits"), new_version(), "o", "", "team-a")
    assert first.version.tenant == "team-a" and (await store.get_model("digits")).model.tenant == "team-a"
    assert await raw_redis.hget(keys.model("digits"), "tenant") == b"team-a"
    assert await raw_redis.hget(keys.version("digits", 1), "tenant") == b"team-a"
    with pytest.raises(OtherTenantsModel) as refused:
        await store.create_version(new_model("digits"), new_version(), "o", "", "team-b")
    assert refused.value.tenant == "team-a"
    assert await raw_redis.hget(keys.model("digits"), "latest") == b"1"  # nothing written
    # An admin that named no tenant joins the model's.
    _, second = await store.create_version(new_model("digits"), new_version(), "o", "", "ops", adopt_tenant=True)
    assert second.number == 2 and second.version.tenant == "team-a"


async def test_the_tenant_is_stored_beside_the_proto_not_in_it(store, raw_redis):
    created_model = new_model("digits")
    created_model.tenant = "forged"
    await store.create_version(created_model, new_version(), "o", "", "team-a")
    record = await store.get_model("digits")
    assert record.model.tenant == "team-a"
    changed = model_pb2.Model()
    changed.CopyFrom(record.model)
    changed.display_name = "new"
    await store.update_model(record, changed)
    assert b"team-a" not in await raw_redis.hget(keys.model("digits"), "proto")


async def test_records_without_a_tenant_are_the_default_tenants(store, deployment_store, raw_redis, tmp_path):
    number = await ready_version(store, tmp_path, "old", tenant="team-a")
    await raw_redis.hdel(keys.model("old"), "tenant")
    await raw_redis.hdel(keys.version("old", number), "tenant")
    assert (await store.get_model("old")).model.tenant == "default"
    assert (await store.get_version("old", number)).version.tenant == "default"
    deployment = deployment_pb2.Deployment(name="deployments/old", serving_name="old",
                                           state=deployment_pb2.DEPLOYMENT_STATE_DEPLOYING)
    deployment.traffic.add(model_version=f"models/old/versions/{number}", percent=100)
    assert (await deployment_store.spec_writer.create(deployment, [("old", number)], "")).ok  # written without a tenant
    assert (await deployment_store.get("old")).deployment.tenant == "default"
    # A default member sees and deletes them, another tenant does not.
    registry = ModelRegistry(store, tmp_path)
    with pytest.raises(errors.NotFound):
        await registry.get_model(MEMBER_A, "models/old")
    assert (await registry.get_model(Identity("default", Role.MEMBER), "models/old")).tenant == "default"


async def test_deletes_check_the_tenant_in_the_script(store, raw_redis, tmp_path):
    await store.create_version(new_model("digits"), new_version(), "o", "", "team-a")
    await raw_redis.srem(keys.active_exports(), "digits/1")
    assert await store.delete_version("digits", 1, "team-b") == ("missing", "")
    assert await store.delete_model("digits", "team-b") == ("missing", [])
    assert await raw_redis.exists(keys.model("digits"), keys.version("digits", 1)) == 2
    assert (await store.delete_model("digits", "team-a"))[0] == "deleted"


async def test_deployments_serve_only_their_tenants_versions(store, deployment_store, tmp_path):
    a = await ready_version(store, tmp_path, "a-model", tenant="team-a")
    b = await ready_version(store, tmp_path, "b-model", tenant="team-b")
    manager = DeploymentManager(deployment_store, store, "127.0.0.1:9000")

    def serving(model: str, number: int, name: str) -> deployment_pb2.Deployment:
        deployment = deployment_pb2.Deployment(serving_name=name)
        deployment.traffic.add(model_version=f"models/{model}/versions/{number}", percent=100)
        return deployment

    created = await manager.create(MEMBER_A, "a-dep", serving("a-model", a, "shared"), "")
    assert created.tenant == "team-a"
    with pytest.raises(errors.NotFound, match="does not exist"):
        await manager.create(MEMBER_A, "a-dep-2", serving("b-model", b, "other"), "")
    with pytest.raises(errors.AlreadyExists) as taken:
        await manager.create(MEMBER_B, "b-dep", serving("b-model", b, "shared"), "")
    assert "a-dep" not in str(taken.value)  # taken, without naming who holds it
    with pytest.raises(errors.NotFound):
        await manager.get(MEMBER_B, "deployments/a-dep")
    with pytest.raises(errors.AlreadyExists, match="deployments/a-dep"):
        await manager.create(MEMBER_A, "a-dep-3", serving("a-model", a, "shared"), "")
    # An admin's change cannot move a deployment onto another tenant's model.
    with pytest.raises(errors.InvalidArgument, match="team-b"):
        change = serving("b-model", b, "")
        change.name = "deployments/a-dep"
        await manager.update(ADMIN, change, field_mask_pb2.FieldMask(paths=["traffic"]))
    assert [d.name for d in (await manager.list_deployments(ADMIN, 0, "", "", "", "team-b"))[0]] == []
    assert [d.tenant for d in (await manager.list_deployments(ADMIN, 0, "", "", ""))[0]] == ["team-a"]


async def test_a_domain_call_without_a_caller_cannot_act_as_admin(store, tmp_path):
    await store.create_version(new_model("secret"), new_version(), "o", "", "team-a")
    registry = ModelRegistry(store, tmp_path)
    servicer = ExporterServicer(exports=None, models=registry, deployments=None)  # type: ignore[arg-type]
    # Served outside a call (no interceptor named a caller): refused, not answered as the local admin
    # (before issue 22.5 the caller's contextvar defaulted to LOCAL, an admin).
    with pytest.raises(identity.NoCaller):
        await servicer.GetModel(es.GetModelRequest(name="models/secret"), None)
    with pytest.raises(TypeError):
        await registry.get_model("models/secret")  # type: ignore[call-arg]
    # With the caller named, the rules apply to it, and only an admin sees another tenant's model.
    with pytest.raises(errors.NotFound):
        await registry.get_model(MEMBER_B, "models/secret")
    assert (await registry.get_model(ADMIN, "models/secret")).tenant == "team-a"
    with identity.acting_as(MEMBER_B), pytest.raises(errors.NotFound):
        await servicer.GetModel(es.GetModelRequest(name="models/secret"), None)


# The exporter's own work (the lost-export sweep, a lost cluster, shutdown) acts for nobody.
_OWN_WORK = {"cluster_lost", "sweep", "run_sweeper", "shutdown"}


@pytest.mark.parametrize("domain", [ModelRegistry, DeploymentManager, ExportManager])
def test_every_public_domain_call_takes_the_caller_first_with_no_default(domain):
    calls = {name: fn for name, fn in vars(domain).items()
             if not name.startswith("_") and name not in _OWN_WORK and inspect.isfunction(fn)}
    assert calls  # the class was read
    for name, fn in calls.items():
        first = list(inspect.signature(fn).parameters.values())[1]
        assert first.name == "caller" and first.default is inspect.Parameter.empty, f"{domain.__name__}.{name}"
