"""The reconcile loop against a real Redis, over an in-test ServingController (the real one needs
Ray Serve: tests/integration/exporter/test_deploy.py drives it). Asserts on what is applied and
on the state each deployment records."""

from __future__ import annotations

import asyncio
import json

import pytest
from google.protobuf import field_mask_pb2

from paddleray.exporter.v1 import deployment_pb2, model_pb2
from paddleray.services.common import errors
from paddleray.services.common.identity import LOCAL
from paddleray.services.exporter.deploy.deployments import DeploymentManager
from paddleray.services.exporter.deploy.reconciler import Reconciler
from paddleray.services.exporter.serving.control.serve_status import VersionState, VersionStatus
from support.exporter import ready_version

pytestmark = pytest.mark.unit
D = deployment_pb2.DeploymentState


def split(*targets: tuple[int, int], **fields) -> deployment_pb2.Deployment:
    return deployment_pb2.Deployment(traffic=[
        deployment_pb2.TrafficTarget(model_version=f"models/digits/versions/{n}", percent=p) for n, p in targets],
        **fields)


async def test_recorded_deployments_are_applied_and_their_observed_state_recorded(
        manager, reconciler, controller, deployment_store, store, tmp_path):
    for _ in range(2):
        await ready_version(store, tmp_path, "digits")
    await manager.create(LOCAL, "prod", split((1, 90), (2, 10), serving_name="digits", num_replicas=2), "")
    await reconciler.reconcile()
    (served,) = controller.applied[-1]
    assert served.serving_name == "digits" and controller.starts == 1
    assert controller.known == ["digits"]  # the server app knows it before its app answers (issue 21.12)
    assert [(v.version, v.weight, v.backend) for v in served.versions] == [("1", 90.0, "paddle"), ("2", 10.0, "paddle")]
    assert served.num_replicas == 2
    assert served.versions[0].artifact_dir == str(tmp_path / "models" / "digits" / "versions" / "1")
    stored = (await deployment_store.get("prod")).deployment
    assert stored.state == D.DEPLOYMENT_STATE_HEALTHY and stored.state_reason == ""
    assert [(s.model_version, s.running_replicas, s.state) for s in stored.version_statuses] == [
        ("models/digits/versions/1", 1, D.DEPLOYMENT_STATE_HEALTHY),
        ("models/digits/versions/2", 1, D.DEPLOYMENT_STATE_HEALTHY)]
    assert [(n.node_id, n.node_ip, n.running_replicas) for n in stored.version_statuses[0].replicas_per_node] == [
        ("node-a", "10.0.0.1", 1)]
    # Nothing changed: nothing is applied again.
    await reconciler.reconcile()
    assert len(controller.applied) == 1


async def test_an_unspecified_backend_is_the_fastest_validated_one(manager, reconciler, controller, store, tmp_path):
    await ready_version(store, tmp_path, "digits", backends=("paddle", "onnx"))
    await manager.create(LOCAL, "prod", split((1, 100)), "")
    await reconciler.reconcile()
    assert controller.applied[-1][0].versions[0].backend == "onnx"
    live = await manager.get(LOCAL, "deployments/prod")
    assert live.version_statuses[0].backend == model_pb2.BACKEND_ONNX_RUNTIME


async def test_updates_are_applied_and_a_new_cluster_gets_everything_again(
        manager, reconciler, controller, cluster, store, tmp_path):
    for _ in range(2):
        await ready_version(store, tmp_path, "digits")
    await manager.create(LOCAL, "prod", split((1, 100)), "")
    await reconciler.reconcile()
    updated = await manager.update(LOCAL, split((1, 50), (2, 50), name="deployments/prod"),
                                   field_mask_pb2.FieldMask(paths=["traffic"]))
    assert updated.state == D.DEPLOYMENT_STATE_UPDATING
    await reconciler.reconcile()
    assert [v.weight for v in controller.applied[-1][0].versions] == [50.0, 50.0]
    assert (await manager.get(LOCAL, "deployments/prod")).state == D.DEPLOYMENT_STATE_HEALTHY
    applied = len(controller.applied)
    # The Ray head restarted: Serve and its apps are gone. While it is away nothing is applied
    # and the deployment says why; once connected again everything is deployed again.
    cluster.connected = False
    await reconciler.cluster_lost("the Ray cluster at x was lost (restarted)")
    lost = await manager.get(LOCAL, "deployments/prod")
    assert lost.state == D.DEPLOYMENT_STATE_UNHEALTHY and "was lost (restarted)" in lost.state_reason
    with pytest.raises(errors.Unavailable):
        await reconciler.reconcile()
    assert controller.starts == 1 and len(controller.applied) == applied
    cluster.connected, cluster.generation = True, 2
    await reconciler.reconcile()
    assert controller.starts == 2 and len(controller.applied) == applied + 1
    assert (await manager.get(LOCAL, "deployments/prod")).state == D.DEPLOYMENT_STATE_HEALTHY


async def test_a_restarted_exporter_applies_every_recorded_deployment(
        manager, deployment_store, store, controller, cluster, tmp_path):
    await ready_version(store, tmp_path, "digits")
    await manager.create(LOCAL, "prod", split((1, 100)), "")
    fresh = Reconciler(deployment_store, store, controller, cluster, tmp_path)
    await fresh.reconcile()
    assert [m.serving_name for m in controller.applied[-1]] == ["prod"]


async def test_replicas_that_cannot_be_placed_make_the_deployment_unhealthy_with_the_reason(
        manager, reconciler, controller, deployment_store, store, tmp_path):
    await ready_version(store, tmp_path, "digits")
    await manager.create(LOCAL, "prod", split((1, 100), resources_per_replica={"num_gpus": 4}), "")
    message = ("Deployment 'Model' has 1 replicas that have taken more than 30s to be scheduled. "
               "Resources required for each replica: {'CPU': 1, 'GPU': 4}, total resources available: {'CPU': 2}.")
    controller.live[("prod", "1")] = (VersionState.DEPLOYING, message)
    await reconciler.reconcile()
    stored = (await deployment_store.get("prod")).deployment
    assert stored.state == D.DEPLOYMENT_STATE_UNHEALTHY and "to be scheduled" in stored.state_reason


async def test_a_deploy_not_answered_yet_is_still_deploying_and_one_that_stops_answering_is_unhealthy(
        manager, reconciler, controller, deployment_store, store, tmp_path):
    """Right after an app is added, HAProxy answers 503 until its first health checks pass: the
    deployment is not HEALTHY then (issue 21.10), but not UNHEALTHY either. A client waiting for a
    settled state (the demo, `wait_deployment`) was told UNHEALTHY and gave up (CI). Once HEALTHY,
    an endpoint that stops answering is UNHEALTHY."""
    await ready_version(store, tmp_path, "digits")
    await manager.create(LOCAL, "prod", split((1, 100)), "")
    probe = "not answering on the gRPC endpoint 127.0.0.1:1: UNAVAILABLE Received http2 header with status: 503"
    controller.unanswered[("prod", "1")] = probe
    await reconciler.reconcile()
    stored = (await deployment_store.get("prod")).deployment
    assert stored.state == D.DEPLOYMENT_STATE_DEPLOYING, stored
    assert stored.state_reason == f"models/digits/versions/1: {probe}"
    assert stored.version_statuses[0].state == D.DEPLOYMENT_STATE_DEPLOYING

    del controller.unanswered[("prod", "1")]
    await reconciler.reconcile()
    assert (await deployment_store.get("prod")).deployment.state == D.DEPLOYMENT_STATE_HEALTHY

    controller.unanswered[("prod", "1")] = probe
    await reconciler.reconcile()
    stored = (await deployment_store.get("prod")).deployment
    assert stored.state == D.DEPLOYMENT_STATE_UNHEALTHY and probe in stored.state_reason, stored


async def test_a_missing_artifact_fails_only_its_deployment(manager, reconciler, controller, deployment_store, store,
                                                             tmp_path):
    await ready_version(store, tmp_path, "digits")
    await ready_version(store, tmp_path, "other")
    await manager.create(LOCAL, "good", deployment_pb2.Deployment(
        traffic=[deployment_pb2.TrafficTarget(model_version="models/other/versions/1", percent=100)]), "")
    await manager.create(LOCAL, "broken", split((1, 100)), "")
    (tmp_path / "models" / "digits" / "versions" / "1" / "manifest.json").unlink()
    await reconciler.reconcile()
    assert [m.serving_name for m in controller.applied[-1]] == ["good"]
    broken = (await deployment_store.get("broken")).deployment
    assert broken.state == D.DEPLOYMENT_STATE_UNHEALTHY and "artifact of models/digits/versions/1" in broken.state_reason
    assert (await deployment_store.get("good")).deployment.state == D.DEPLOYMENT_STATE_HEALTHY
    # GetDeployment (Serve's status now) says so too, not "replicas are (re)starting".
    shown = await reconciler.live(await deployment_store.get("broken"))
    assert shown.state == D.DEPLOYMENT_STATE_UNHEALTHY and "missing from storage" in shown.state_reason, shown


async def test_a_deleted_deployment_is_removed_once_serve_no_longer_serves_it(
        manager, reconciler, controller, deployment_store, store, tmp_path):
    await ready_version(store, tmp_path, "digits")
    await manager.create(LOCAL, "prod", split((1, 100)), "")
    await reconciler.reconcile()
    await manager.delete(LOCAL, "deployments/prod")
    await reconciler.reconcile()
    assert controller.applied[-1] == []
    await reconciler.reconcile()
    assert await deployment_store.get("prod") is None
    assert await store.version_deployments("digits", 1) == set()


async def test_a_deployment_is_not_healthy_before_the_apply_of_its_spec_returned(
        manager, reconciler, controller, store, tmp_path):
    await ready_version(store, tmp_path, "digits")
    await manager.create(LOCAL, "prod", split((1, 100)), "")
    controller.release.clear()
    applying = asyncio.create_task(reconciler.reconcile())
    while not controller.applied:
        await asyncio.sleep(0.01)
    assert (await manager.get(LOCAL, "deployments/prod")).state == D.DEPLOYMENT_STATE_DEPLOYING
    controller.release.set()
    await applying
    assert (await manager.get(LOCAL, "deployments/prod")).state == D.DEPLOYMENT_STATE_HEALTHY


class Refused:
    """A ServeOwnership whose claim fails as when another installation's exporter manages Serve."""

    def __init__(self) -> None:
        self.installation = ""
        self.refuse = True

    def claim(self) -> None:
        if self.refuse:
            raise errors.FailedPrecondition("Ray Serve on this cluster is managed by another paddleray installation")


async def test_serve_managed_by_another_installation_is_left_alone_and_deployments_say_why(
        deployment_store, store, controller, cluster, tmp_path):
    ownership = Refused()
    reconciler = Reconciler(deployment_store, store, controller, cluster, tmp_path, ownership=ownership)
    manager = DeploymentManager(deployment_store, store, "127.0.0.1:9000", reconciler.wake, reconciler.live)
    await ready_version(store, tmp_path, "digits")
    await manager.create(LOCAL, "prod", split((1, 100), serving_name="digits"), "")
    await reconciler.reconcile()
    assert controller.starts == 0 and controller.applied == []
    stored = (await deployment_store.get("prod")).deployment
    assert stored.state == D.DEPLOYMENT_STATE_UNHEALTHY and "another paddleray installation" in stored.state_reason
    assert ownership.installation, "the installation id is read from Redis before the claim"
    # Once the other one has ended (the claim succeeds), this one starts Serve and applies.
    ownership.refuse = False
    await reconciler.reconcile()
    assert controller.starts == 1 and len(controller.applied) == 1
    assert (await deployment_store.get("prod")).deployment.state == D.DEPLOYMENT_STATE_HEALTHY



async def test_deployments_show_both_endpoints_and_say_when_they_moved(deployment_store, store, controller, cluster,
                                                                       tmp_path):
    reconciler = Reconciler(deployment_store, store, controller, cluster, tmp_path)
    manager = DeploymentManager(deployment_store, store, "127.0.0.1:9000", reconciler.wake, reconciler.live,
                                http_endpoint=lambda name: f"http://127.0.0.1:8000/v2/models/{name}")
    await ready_version(store, tmp_path, "digits")
    await manager.create(LOCAL, "a", split((1, 100), serving_name="digits-a"), "")
    await reconciler.reconcile()
    live = await manager.get(LOCAL, "deployments/a")
    assert live.endpoint == "127.0.0.1:9000" and live.http_endpoint == "http://127.0.0.1:8000/v2/models/digits-a"
    assert live.state == D.DEPLOYMENT_STATE_HEALTHY and live.state_reason == "" and not live.direct_endpoint
    # A port another process held when Serve started: HEALTHY on the ports it got, and it says so.
    controller.endpoint_note = "port 9000 of 127.0.0.1 is held by another process: serving gRPC on 9100"
    await reconciler.reconcile()
    live = await manager.get(LOCAL, "deployments/a")
    assert live.state == D.DEPLOYMENT_STATE_HEALTHY and "held by another process" in live.state_reason


def test_running_replicas_are_counted_per_node_most_first():
    from paddleray.services.exporter.serving.control.serve_status import _per_node

    replicas = [{"node_id": "b", "node_ip": "10.0.0.2"}, {"node_id": "a", "node_ip": "10.0.0.1"},
                {"node_id": "b", "node_ip": "10.0.0.2"}, {"node_id": "c", "node_ip": "10.0.0.3"}]
    assert _per_node(replicas) == [("b", "10.0.0.2", 2), ("a", "10.0.0.1", 1), ("c", "10.0.0.3", 1)]
    assert _per_node([]) == []


def test_a_version_state_is_an_enum_equal_to_its_name_and_a_stray_string_is_refused():
    status = VersionStatus("1", "READY")  # as JSON or a caller gives it
    assert status.state is VersionState.READY and status.state == "READY" and json.dumps(status.state) == '"READY"'
    with pytest.raises(ValueError):
        VersionStatus("1", "RUNNING")  # Serve's word for an application, not a version state of ours


def test_every_serve_application_status_maps_to_a_version_state():
    from ray.serve.schema import ApplicationStatus

    from paddleray.services.exporter.serving.control.serve_status import _APP_STATES

    assert set(_APP_STATES) == {s.value for s in ApplicationStatus}
    assert all(isinstance(state, VersionState) for state in _APP_STATES.values())
