"""Deployments as resources against a real Redis: the rules of Create/Update/Delete, serving-name
uniqueness, request_id idempotency, and version references that block deleting a served version.
The reconcile loop runs over an in-test controller (the real ServingController needs Ray Serve;
the integration tests use it)."""

from __future__ import annotations

import pytest
from google.protobuf import field_mask_pb2

from paddleray.common.v1 import common_pb2
from paddleray.exporter.v1 import deployment_pb2, model_pb2
from paddleray.services.common import errors, paging
from paddleray.services.common.identity import LOCAL
from paddleray.services.exporter.deploy.deployments import DeploymentManager
from paddleray.services.exporter.registry.models import ModelRegistry
from paddleray.services.exporter.store import keys
from support.exporter import ready_version

pytestmark = pytest.mark.unit
D = deployment_pb2.DeploymentState


@pytest.fixture
def manager(deployment_store, store) -> DeploymentManager:
    return DeploymentManager(deployment_store, store, endpoint="127.0.0.1:9000")


def deployment(*targets: tuple[str, int], **fields) -> deployment_pb2.Deployment:
    return deployment_pb2.Deployment(
        traffic=[deployment_pb2.TrafficTarget(model_version=v, percent=p) for v, p in targets], **fields)


async def test_create_records_the_desired_state_at_once_in_deploying(manager, store, raw_redis, tmp_path):
    await ready_version(store, tmp_path, "digits")
    created = await manager.create(LOCAL, "prod", deployment(("models/digits/versions/1", 100)), "")
    assert created.name == "deployments/prod" and created.state == D.DEPLOYMENT_STATE_DEPLOYING
    assert created.serving_name == "prod" and created.model == "models/digits"
    assert created.endpoint == "127.0.0.1:9000" and created.create_time.seconds > 0
    assert await raw_redis.hget(keys.serving_names(), "prod") == b"prod"
    assert await raw_redis.smembers(keys.version_deployments("digits", 1)) == {b"prod"}
    assert await manager.get(LOCAL, "deployments/prod") == created


async def test_a_served_version_cannot_be_deleted_until_its_deployment_is_gone(manager, store, deployment_store,
                                                                                tmp_path):
    await ready_version(store, tmp_path, "digits")
    await manager.create(LOCAL, "prod", deployment(("models/digits/versions/1", 100)), "")
    registry = ModelRegistry(store, tmp_path)
    with pytest.raises(errors.FailedPrecondition, match="served by deployments prod"):
        await registry.delete_version(LOCAL, "models/digits/versions/1")
    with pytest.raises(errors.FailedPrecondition, match="served by deployments prod"):
        await registry.delete_model(LOCAL, "models/digits")
    deleting = await manager.delete(LOCAL, "deployments/prod")
    assert deleting.state == D.DEPLOYMENT_STATE_DELETING
    record = await deployment_store.get("prod")
    assert await deployment_store.status_writer.remove(record, [("digits", 1)])
    await registry.delete_version(LOCAL, "models/digits/versions/1")
    assert not (tmp_path / "models" / "digits" / "versions" / "1").exists()


async def test_serving_names_are_unique_and_request_ids_idempotent(manager, store, tmp_path):
    await ready_version(store, tmp_path, "digits")
    target = ("models/digits/versions/1", 100)
    first = await manager.create(LOCAL, "prod", deployment(target, serving_name="digits"), "req-1")
    assert await manager.create(LOCAL, "prod", deployment(target, serving_name="digits"), "req-1") == first
    for other_id, other in (("other", deployment(target, serving_name="digits")), ("prod", deployment(target))):
        with pytest.raises(errors.AlreadyExists, match="^request_id: already used by a different request"):
            await manager.create(LOCAL, other_id, other, "req-1")
    with pytest.raises(errors.AlreadyExists, match="serving_name 'digits' is taken by deployments/prod"):
        await manager.create(LOCAL, "second", deployment(target, serving_name="digits"), "")
    with pytest.raises(errors.AlreadyExists, match="deployments/prod already exists"):
        await manager.create(LOCAL, "prod", deployment(target, serving_name="fresh"), "")


async def test_only_ready_versions_validated_for_the_backend_can_be_served(manager, store, tmp_path):
    await ready_version(store, tmp_path, "digits")
    with pytest.raises(errors.NotFound, match=r"deployment.traffic\[0\].model_version: models/digits/versions/9"):
        await manager.create(LOCAL, "a", deployment(("models/digits/versions/9", 100)), "")
    with pytest.raises(errors.FailedPrecondition, match="not exported and validated for BACKEND_ONNX_RUNTIME"):
        await manager.create(LOCAL, "a", deployment(("models/digits/versions/1", 100), backend=model_pb2.BACKEND_ONNX_RUNTIME),
                             "")
    _, record = await store.create_version(
        (await store.get_model("digits")).model, model_pb2.ModelVersion(state=model_pb2.MODEL_VERSION_STATE_EXPORTING),
        "owner", "")
    failed = model_pb2.ModelVersion()
    failed.CopyFrom(record.version)
    failed.state, failed.state_reason = model_pb2.MODEL_VERSION_STATE_VALIDATION_FAILED, "max abs 0.4"
    await store.update_version(record, failed)
    with pytest.raises(errors.FailedPrecondition, match="is MODEL_VERSION_STATE_VALIDATION_FAILED"):
        await manager.create(LOCAL, "a", deployment(("models/digits/versions/2", 100)), "")


BAD = [
    ("Bad_Id", deployment(("models/digits/versions/1", 100)), "deployment_id"),
    ("ok", deployment(), "deployment.traffic"),
    ("ok", deployment(("models/digits/versions/1", 90)), "deployment.traffic"),
    ("ok", deployment(("models/digits/versions/0", 100)), "deployment.traffic[0].model_version"),
    ("ok", deployment(("models/digits/versions/1", 50), ("models/other/versions/1", 50)),
     "deployment.traffic[1].model_version"),
    ("ok", deployment(("models/digits/versions/1", 100), serving_name="Has Space"), "deployment.serving_name"),
    ("ok", deployment(("models/digits/versions/1", 100), num_replicas=65), "deployment.num_replicas"),
    ("ok", deployment(("models/digits/versions/1", 100), autoscaling=deployment_pb2.AutoscalingConfig(
        min_replicas=2, max_replicas=1, target_ongoing_requests=1)), "deployment.autoscaling.max_replicas"),
    ("ok", deployment(("models/digits/versions/1", 100), batching=deployment_pb2.BatchingConfig(max_batch_size=2000)),
     "deployment.batching.max_batch_size"),
    # An explicit 0 CPUs per replica is refused, not read as unset (1 CPU).
    ("ok", deployment(("models/digits/versions/1", 100), resources_per_replica=common_pb2.Resources(num_cpus=0)),
     "deployment.resources_per_replica.num_cpus"),
]


@pytest.mark.parametrize(("deployment_id", "bad", "field"), BAD, ids=[f"{i}-{f}" for i, (_, _, f) in enumerate(BAD)])
async def test_bad_deployments_are_invalid_argument_naming_the_field(manager, store, tmp_path, deployment_id, bad,
                                                                     field):
    await ready_version(store, tmp_path, "digits")
    with pytest.raises(errors.InvalidArgument) as info:
        await manager.create(LOCAL, deployment_id, bad, "")
    assert info.value.field == field


async def test_update_moves_traffic_and_version_references(manager, store, raw_redis, tmp_path):
    await ready_version(store, tmp_path, "digits")
    await ready_version(store, tmp_path, "digits")
    await manager.create(LOCAL, "prod", deployment(("models/digits/versions/1", 100)), "")
    change = deployment(("models/digits/versions/1", 90), ("models/digits/versions/2", 10), name="deployments/prod")
    updated = await manager.update(LOCAL, change, field_mask_pb2.FieldMask(paths=["traffic"]))
    assert updated.state == D.DEPLOYMENT_STATE_UPDATING and [t.percent for t in updated.traffic] == [90, 10]
    assert await raw_redis.smembers(keys.version_deployments("digits", 2)) == {b"prod"}
    only_two = deployment(("models/digits/versions/2", 100), name="deployments/prod")
    await manager.update(LOCAL, only_two, field_mask_pb2.FieldMask(paths=["traffic"]))
    assert await raw_redis.smembers(keys.version_deployments("digits", 1)) == set()
    with pytest.raises(errors.InvalidArgument, match="serving_name cannot be changed"):
        await manager.update(LOCAL, only_two, field_mask_pb2.FieldMask(paths=["serving_name"]))


async def test_list_filters_by_model_and_version_and_pages(manager, store, tmp_path):
    for model_id in ("a", "b"):
        await ready_version(store, tmp_path, model_id)
    for i, model_id in enumerate(("a", "a", "b")):
        await manager.create(LOCAL, f"d{i}", deployment((f"models/{model_id}/versions/1", 100)), "")
    page, token = await manager.list_deployments(LOCAL, 1, "", "models/a", "")
    assert [d.name for d in page] == ["deployments/d1"] and token
    page, token = await manager.list_deployments(LOCAL, 1, token, "models/a", "")
    assert [d.name for d in page] == ["deployments/d0"]
    with pytest.raises(errors.InvalidArgument, match="page_token"):
        await manager.list_deployments(LOCAL, 1, token, "models/b", "")
    page, _ = await manager.list_deployments(LOCAL, 0, "", "", "models/b/versions/1")
    assert [d.name for d in page] == ["deployments/d2"]
    page, token = await manager.list_deployments(LOCAL, paging.MAX_PAGE_SIZE + 1, "", "", "")
    assert len(page) == 3 and token == "", "above the maximum is coerced, not rejected (AIP-158)"
