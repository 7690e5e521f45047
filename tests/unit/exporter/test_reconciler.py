"""The reconcile loop against a real Redis, over an in-test ServingController (the real one needs
Ray Serve: tests/integration/exporter/test_deploy.py drives it). Asserts on what is applied and
on the state each deployment records."""

from __future__ import annotations

import asyncio

import pytest
from google.protobuf import field_mask_pb2

from paddleray.exporter.v1 import deployment_pb2, model_pb2
from paddleray.services.common import errors
from paddleray.services.exporter.deployments import DeploymentManager
from paddleray.services.exporter.reconciler import Reconciler
from paddleray.services.exporter.serving.controller import ServedModelStatus, VersionStatus
from paddleray.services.exporter.serving.spec import validate_models
from support.exporter import ready_version

pytestmark = pytest.mark.unit
D = deployment_pb2.DeploymentState


class Controller:
    """Applies instantly; status() reports what was applied, with the live state a test sets."""

    def __init__(self) -> None:
        self.starts = 0
        self.applied: list[list] = []
        self.release = asyncio.Event()
        self.release.set()
        self.live: dict[tuple[str, str], tuple[str, str]] = {}  # (name, version) -> (state, message)

    async def start(self) -> None:
        self.starts += 1

    async def apply(self, models) -> None:
        validate_models(models)  # the serving layer's own rules
        self.applied.append(list(models))  # status() shows it at once, as Serve's does
        await self.release.wait()

    async def status(self):
        found = {}
        for model in self.applied[-1] if self.applied else []:
            versions = {}
            for v in model.versions:
                state, message = self.live.get((model.serving_name, v.version), ("READY", ""))
                running = 1 if state == "READY" else 0
                versions[v.version] = VersionStatus(v.version, state, running, 1, state == "READY", v.weight, message)
            found[model.serving_name] = ServedModelStatus(model.serving_name, versions)
        return found


class Cluster:
    """The parts of RayConnection the reconciler reads (the real one needs a Ray head it can
    stop: tests/e2e/test_exporter_ray_connection.py)."""

    def __init__(self) -> None:
        self.generation = 1
        self.connected = True

    def require(self) -> None:
        if not self.connected:
            raise errors.Unavailable("the Ray cluster cannot be reached")


@pytest.fixture
def controller() -> Controller:
    return Controller()


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


@pytest.fixture
def reconciler(deployment_store, store, controller, cluster, tmp_path) -> Reconciler:
    return Reconciler(deployment_store, store, controller, cluster, tmp_path)


@pytest.fixture
def manager(deployment_store, store, reconciler) -> DeploymentManager:
    return DeploymentManager(deployment_store, store, "127.0.0.1:9000", reconciler.wake, reconciler.live)


def split(*targets: tuple[int, int], **fields) -> deployment_pb2.Deployment:
    return deployment_pb2.Deployment(traffic=[
        deployment_pb2.TrafficTarget(model_version=f"models/digits/versions/{n}", percent=p) for n, p in targets],
        **fields)


async def test_recorded_deployments_are_applied_and_their_observed_state_recorded(
        manager, reconciler, controller, deployment_store, store, tmp_path):
    for _ in range(2):
        await ready_version(store, tmp_path, "digits")
    await manager.create("prod", split((1, 90), (2, 10), serving_name="digits", num_replicas=2), "")
    await reconciler.reconcile()
    (served,) = controller.applied[-1]
    assert served.serving_name == "digits" and controller.starts == 1
    assert [(v.version, v.weight, v.backend, v.num_replicas) for v in served.versions] == [
        ("1", 90.0, "paddle", 2), ("2", 10.0, "paddle", 2)]
    assert served.versions[0].artifact_dir == str(tmp_path / "models" / "digits" / "versions" / "1")
    stored = (await deployment_store.get("prod")).deployment
    assert stored.state == D.DEPLOYMENT_STATE_HEALTHY and stored.state_reason == ""
    assert [(s.model_version, s.running_replicas, s.state) for s in stored.version_statuses] == [
        ("models/digits/versions/1", 1, D.DEPLOYMENT_STATE_HEALTHY),
        ("models/digits/versions/2", 1, D.DEPLOYMENT_STATE_HEALTHY)]
    # Nothing changed: nothing is applied again.
    await reconciler.reconcile()
    assert len(controller.applied) == 1


async def test_an_unspecified_backend_is_the_fastest_validated_one(manager, reconciler, controller, store, tmp_path):
    await ready_version(store, tmp_path, "digits", backends=("paddle", "onnx"))
    await manager.create("prod", split((1, 100)), "")
    await reconciler.reconcile()
    assert controller.applied[-1][0].versions[0].backend == "onnx"
    live = await manager.get("deployments/prod")
    assert live.version_statuses[0].backend == model_pb2.BACKEND_ONNX_RUNTIME


async def test_updates_are_applied_and_a_new_cluster_gets_everything_again(
        manager, reconciler, controller, cluster, store, tmp_path):
    for _ in range(2):
        await ready_version(store, tmp_path, "digits")
    await manager.create("prod", split((1, 100)), "")
    await reconciler.reconcile()
    updated = await manager.update(split((1, 50), (2, 50), name="deployments/prod"),
                                   field_mask_pb2.FieldMask(paths=["traffic"]))
    assert updated.state == D.DEPLOYMENT_STATE_UPDATING
    await reconciler.reconcile()
    assert [v.weight for v in controller.applied[-1][0].versions] == [50.0, 50.0]
    assert (await manager.get("deployments/prod")).state == D.DEPLOYMENT_STATE_HEALTHY
    applied = len(controller.applied)
    # The Ray head restarted: Serve and its apps are gone. While it is away nothing is applied
    # and the deployment says why; once connected again everything is deployed again.
    cluster.connected = False
    await reconciler.cluster_lost("the Ray cluster at x was lost (restarted)")
    lost = await manager.get("deployments/prod")
    assert lost.state == D.DEPLOYMENT_STATE_UNHEALTHY and "was lost (restarted)" in lost.state_reason
    with pytest.raises(errors.Unavailable):
        await reconciler.reconcile()
    assert controller.starts == 1 and len(controller.applied) == applied
    cluster.connected, cluster.generation = True, 2
    await reconciler.reconcile()
    assert controller.starts == 2 and len(controller.applied) == applied + 1
    assert (await manager.get("deployments/prod")).state == D.DEPLOYMENT_STATE_HEALTHY


async def test_a_restarted_exporter_applies_every_recorded_deployment(
        manager, deployment_store, store, controller, cluster, tmp_path):
    await ready_version(store, tmp_path, "digits")
    await manager.create("prod", split((1, 100)), "")
    fresh = Reconciler(deployment_store, store, controller, cluster, tmp_path)
    await fresh.reconcile()
    assert [m.serving_name for m in controller.applied[-1]] == ["prod"]


async def test_replicas_that_cannot_be_placed_make_the_deployment_unhealthy_with_the_reason(
        manager, reconciler, controller, deployment_store, store, tmp_path):
    await ready_version(store, tmp_path, "digits")
    await manager.create("prod", split((1, 100), resources_per_replica={"num_gpus": 4}), "")
    message = ("Deployment 'Model' has 1 replicas that have taken more than 30s to be scheduled. "
               "Resources required for each replica: {'CPU': 1, 'GPU': 4}, total resources available: {'CPU': 2}.")
    controller.live[("prod", "1")] = ("DEPLOYING", message)
    await reconciler.reconcile()
    stored = (await deployment_store.get("prod")).deployment
    assert stored.state == D.DEPLOYMENT_STATE_UNHEALTHY and "to be scheduled" in stored.state_reason


async def test_a_missing_artifact_fails_only_its_deployment(manager, reconciler, controller, deployment_store, store,
                                                             tmp_path):
    await ready_version(store, tmp_path, "digits")
    await ready_version(store, tmp_path, "other")
    await manager.create("good", deployment_pb2.Deployment(
        traffic=[deployment_pb2.TrafficTarget(model_version="models/other/versions/1", percent=100)]), "")
    await manager.create("broken", split((1, 100)), "")
    (tmp_path / "models" / "digits" / "versions" / "1" / "manifest.json").unlink()
    await reconciler.reconcile()
    assert [m.serving_name for m in controller.applied[-1]] == ["good"]
    broken = (await deployment_store.get("broken")).deployment
    assert broken.state == D.DEPLOYMENT_STATE_UNHEALTHY and "artifact of models/digits/versions/1" in broken.state_reason
    assert (await deployment_store.get("good")).deployment.state == D.DEPLOYMENT_STATE_HEALTHY


async def test_a_deleted_deployment_is_removed_once_serve_no_longer_serves_it(
        manager, reconciler, controller, deployment_store, store, tmp_path):
    await ready_version(store, tmp_path, "digits")
    await manager.create("prod", split((1, 100)), "")
    await reconciler.reconcile()
    await manager.delete("deployments/prod")
    await reconciler.reconcile()
    assert controller.applied[-1] == []
    await reconciler.reconcile()
    assert await deployment_store.get("prod") is None
    assert await store.version_deployments("digits", 1) == set()


async def test_a_deployment_is_not_healthy_before_the_apply_of_its_spec_returned(
        manager, reconciler, controller, store, tmp_path):
    await ready_version(store, tmp_path, "digits")
    await manager.create("prod", split((1, 100)), "")
    controller.release.clear()
    applying = asyncio.create_task(reconciler.reconcile())
    while not controller.applied:
        await asyncio.sleep(0.01)
    assert (await manager.get("deployments/prod")).state == D.DEPLOYMENT_STATE_DEPLOYING
    controller.release.set()
    await applying
    assert (await manager.get("deployments/prod")).state == D.DEPLOYMENT_STATE_HEALTHY


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
    await manager.create("prod", split((1, 100), serving_name="digits"), "")
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



async def test_each_deployment_is_served_on_a_direct_port_of_its_own_that_it_keeps(
        deployment_store, store, controller, cluster, raw_redis, tmp_path):
    from paddleray.services.exporter.direct_ports import DirectPorts
    from support.ports import free_port_range

    ports = DirectPorts(raw_redis, free_port_range(4))
    reconciler = Reconciler(deployment_store, store, controller, cluster, tmp_path, direct_ports=ports)

    async def shown() -> dict[str, str]:
        return {d: f"10.0.0.1:{p}" for d, p in (await ports.assigned()).items()}

    manager = DeploymentManager(deployment_store, store, "127.0.0.1:9000", reconciler.wake, reconciler.live,
                                direct_endpoints=shown)
    await ready_version(store, tmp_path, "digits")
    await manager.create("a", split((1, 100)), "")
    await manager.create("b", split((1, 100)), "")
    await reconciler.reconcile()
    by_name = {m.serving_name: m.direct_port for m in controller.applied[-1]}
    assert len(set(by_name.values())) == 2 and all(by_name.values())
    live = await manager.get("deployments/a")
    assert live.direct_endpoint == f"10.0.0.1:{by_name['a']}" and live.endpoint == "127.0.0.1:9000"
    listed, _ = await manager.list_deployments(10, "", "", "")
    assert {d.name: d.direct_endpoint for d in listed} == {
        f"deployments/{n}": f"10.0.0.1:{p}" for n, p in by_name.items()}
    # An exporter restart (a new reconciler on the same Redis) serves each on the same port.
    again = Reconciler(deployment_store, store, controller, cluster, tmp_path, direct_ports=DirectPorts(raw_redis, ports.ports))
    await manager.update(split((1, 100), name="deployments/a", num_replicas=2), field_mask_pb2.FieldMask(paths=["num_replicas"]))
    await again.reconcile()
    assert {m.serving_name: m.direct_port for m in controller.applied[-1]} == by_name
