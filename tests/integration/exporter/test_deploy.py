"""Deployments end to end on the real ServingController (Ray Serve on the shared Ray head): an
exported version deployed, HEALTHY with replica counts, answering v2 ModelInfer through the
generated stubs with the dynamic model's outputs on the endpoints the deployment shows (gRPC with
its `application` metadata, and REST), guarded against deletion while served, split 90/10 by
weight on both, then undeployed."""

from __future__ import annotations

import importlib
import sys
import time
from collections import Counter

import grpc
import numpy as np
import pytest

from paddleray.common.v1 import common_pb2
from paddleray.exporter.v1 import deployment_pb2, exporter_service_pb2_grpc, model_pb2
from paddleray.exporter.v1 import exporter_service_pb2 as es
from paddleray.inference.v2 import grpc_service_pb2_grpc
from paddleray.services.exporter.serving.replica import codec
from paddleray.services.exporter.settings import ExporterSettings
from support import free_port, wait_until
from support.exporter import BUILDERS, EXAMPLES, WORKERS, ExporterClient, exporter_thread, flush, linear_checkpoint
from support.serving import rest_infer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
D = deployment_pb2.DeploymentState
ENV = common_pb2.RuntimeEnv(env_vars={"PYTHONPATH": str(WORKERS)})
REPLICA = common_pb2.Resources(num_cpus=0.1)  # several replicas fit on the 2-CPU test head


@pytest.fixture(scope="module")
def serving_exporter(ray_cluster, redis_server, tmp_path_factory):
    flush(redis_server.url)
    settings = ExporterSettings(
        port=0, redis_url=redis_server.url, ray_address=ray_cluster, storage_root=tmp_path_factory.mktemp("deploy"),
        builder_allowlist=[EXAMPLES, BUILDERS], scheduler_address="", export_num_cpus=0.5,
        serving_grpc_port=free_port(), serving_http_port=free_port(), reconcile_interval_s=1.0,
    )
    thread = exporter_thread(settings)
    yield thread
    thread.run(thread.app.controller.stop(shutdown_serve=True), timeout=120)
    thread.stop()


class Inference:
    """The v2 stub at the port Serve's HAProxy really uses, known once the first deployment started
    Serve (a Serve an earlier test left on the shared head keeps the port it was started with);
    each call names its model as `application` metadata, as Serve routes between apps by it."""

    def __init__(self, app) -> None:
        self.app = app
        self._channel: grpc.Channel | None = None

    def ModelInfer(self, request, timeout: float):  # noqa: N802 - the v2 RPC's name
        if self._channel is None:
            self._channel = grpc.insecure_channel(f"127.0.0.1:{self.app.controller.grpc_port}")
        return grpc_service_pb2_grpc.GRPCInferenceServiceStub(self._channel).ModelInfer(
            request, timeout=timeout, metadata=(("application", request.model_name),))

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()


@pytest.fixture(scope="module")
def clients(serving_exporter):
    inference = Inference(serving_exporter.app)
    with grpc.insecure_channel(serving_exporter.address) as channel:
        yield ExporterClient(exporter_service_pb2_grpc.ExporterServiceStub(channel)), inference
    inference.close()


def _dynamic(checkpoint: str, x: np.ndarray) -> np.ndarray:
    import paddle

    sys.path.insert(0, str(WORKERS))
    try:
        model = importlib.import_module(BUILDERS).build_linear({})
    finally:
        sys.path.remove(str(WORKERS))
    model.set_state_dict(paddle.load(f"{checkpoint}/model.pdparams"))
    model.eval()
    with paddle.no_grad():
        return model(paddle.to_tensor(x)).numpy()



def _get(client: ExporterClient, name: str) -> deployment_pb2.Deployment:
    return client.stub.GetDeployment(es.GetDeploymentRequest(name=name), timeout=30).deployment


def _wait_state(client: ExporterClient, name: str, state: int, timeout: float = 300) -> deployment_pb2.Deployment:
    def reached():
        deployment = _get(client, name)
        # On this loaded 2-core machine a replica may wait over 30 s for a worker: Serve then
        # reports it unscheduled, which shows as UNHEALTHY until it starts. Anything else fails.
        if deployment.state == D.DEPLOYMENT_STATE_UNHEALTHY:
            assert "to be scheduled" in deployment.state_reason, deployment.state_reason
        return deployment if deployment.state == state else None

    return wait_until(reached, timeout=timeout, interval=0.5, message=f"{name} to be {D.Name(state)}")


def _gone(client: ExporterClient, name: str) -> bool:
    try:
        _get(client, name)
    except grpc.RpcError as exc:
        return exc.code() == grpc.StatusCode.NOT_FOUND
    return False


@pytest.fixture(scope="module")
def versions(clients, serving_exporter):
    client, _ = clients
    root = serving_exporter.app.settings.storage_root
    found = []
    for seed in (1, 2):
        checkpoint = linear_checkpoint(root, seed=seed)
        version = client.export(parent="models/linear", checkpoint_uri=checkpoint,
                                model_builder=f"{BUILDERS}:build_linear", runtime_env=ENV)
        done = client.wait_done(version.name)
        assert done.state == model_pb2.MODEL_VERSION_STATE_READY, done.state_reason
        found.append((done.name, checkpoint))
    return found


def test_a_deployed_version_serves_the_dynamic_models_predictions_until_undeployed(clients, versions):
    client, inference = clients
    (name, checkpoint), _ = versions
    deployment = deployment_pb2.Deployment(
        serving_name="linear", resources_per_replica=REPLICA,
        traffic=[deployment_pb2.TrafficTarget(model_version=name, percent=100)])
    created = client.stub.CreateDeployment(es.CreateDeploymentRequest(deployment_id="linear", deployment=deployment),
                                           timeout=30).deployment
    assert created.state == D.DEPLOYMENT_STATE_DEPLOYING and created.name == "deployments/linear"
    healthy = _wait_state(client, created.name, D.DEPLOYMENT_STATE_HEALTHY)
    (status,) = healthy.version_statuses
    assert status.running_replicas == 1 and status.target_replicas == 1
    assert status.backend == model_pb2.BACKEND_PADDLE_INFERENCE
    x = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    response = inference.ModelInfer(codec.encode_request("linear", {"x": x}), timeout=30)
    assert response.model_version == "1"
    np.testing.assert_allclose(codec.decode_response(response)["fetch_name_0"], _dynamic(checkpoint, x),
                               rtol=1e-5, atol=1e-5)
    assert healthy.endpoint == f"127.0.0.1:{inference.app.controller.grpc_port}" and not healthy.direct_endpoint
    version, outputs = rest_infer(healthy.http_endpoint, {"x": x})
    assert version == "1"
    np.testing.assert_allclose(outputs["fetch_name_0"], _dynamic(checkpoint, x), rtol=1e-5, atol=1e-5)
    with pytest.raises(grpc.RpcError) as info:
        client.stub.DeleteModelVersion(es.DeleteModelVersionRequest(name=name), timeout=30)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "deployments linear" in info.value.details()
    with pytest.raises(grpc.RpcError) as info:
        client.stub.CreateDeployment(es.CreateDeploymentRequest(deployment_id="again", deployment=deployment), timeout=30)
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS

    deleting = client.stub.DeleteDeployment(es.DeleteDeploymentRequest(name=created.name), timeout=30).deployment
    assert deleting.state == D.DEPLOYMENT_STATE_DELETING

    wait_until(lambda: _gone(client, created.name), timeout=180, interval=0.5, message="the deployment to be removed")
    with pytest.raises(grpc.RpcError) as info:
        inference.ModelInfer(codec.encode_request("linear", {"x": x}), timeout=30)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    import urllib.error

    with pytest.raises(urllib.error.HTTPError) as http_info:
        rest_infer(healthy.http_endpoint, {"x": x})
    assert http_info.value.code == 404


def test_a_90_10_split_routes_by_weight_and_model_version_picks_a_version(clients, versions):
    client, inference = clients
    (first, _), (second, checkpoint) = versions
    deployment = deployment_pb2.Deployment(
        serving_name="linear-ab", resources_per_replica=REPLICA,
        traffic=[deployment_pb2.TrafficTarget(model_version=first, percent=90),
                 deployment_pb2.TrafficTarget(model_version=second, percent=10)])
    created = client.stub.CreateDeployment(es.CreateDeploymentRequest(deployment_id="ab", deployment=deployment),
                                           timeout=30).deployment
    healthy = _wait_state(client, created.name, D.DEPLOYMENT_STATE_HEALTHY)
    x = np.ones((1, 8), np.float32)
    calls = {
        "grpc": lambda version="": (lambda r: (r.model_version, codec.decode_response(r)))(
            inference.ModelInfer(codec.encode_request("linear-ab", {"x": x}, version=version), timeout=30)),
        "rest": lambda version="": rest_infer(healthy.http_endpoint, {"x": x}, version),
    }
    for path, call in calls.items():
        served = Counter(call()[0] for _ in range(400))
        # Binomial(400, 0.1): mean 40, sd 6; 5 sd either side.
        assert set(served) == {"1", "2"} and 10 <= served["2"] <= 70, (path, served)
        version, outputs = call("2")
        assert version == "2"
        np.testing.assert_allclose(outputs["fetch_name_0"], _dynamic(checkpoint, x), rtol=1e-5, atol=1e-5)
    listed = client.stub.ListDeployments(es.ListDeploymentsRequest(model_version=second), timeout=30).deployments
    assert [d.name for d in listed] == ["deployments/ab"]
    client.stub.DeleteDeployment(es.DeleteDeploymentRequest(name=created.name), timeout=30)
    wait_until(lambda: _gone(client, created.name), timeout=180, interval=0.5, message="the deployment to be removed")


def test_the_demo_deletes_a_deployment_it_was_creating_when_its_deploy_step_fails(clients, versions, serving_exporter):
    """A demo whose deploy step failed (CI: it settled on a transient UNHEALTHY) left its
    deployment serving in a Ray cluster the next installation then shared; without --keep the demo
    deletes what it was creating, and a deployment it never created is no error of its own."""
    from rich.console import Console

    from paddleray.services.cli import demo_serving
    from paddleray.services.client import Client

    client, _ = clients
    (name, _), _ = versions
    deployment = deployment_pb2.Deployment(serving_name="demo-left", resources_per_replica=REPLICA,
                                           traffic=[deployment_pb2.TrafficTarget(model_version=name, percent=100)])
    client.stub.CreateDeployment(es.CreateDeploymentRequest(deployment_id="demo-left", deployment=deployment), timeout=30)
    console = Console(record=True, width=200)
    with Client.connect(address=serving_exporter.address, exporter_address=serving_exporter.address) as sdk:
        demo_serving.undeploy_if_created(sdk, console, "demo-left")
        demo_serving.undeploy_if_created(sdk, console, "never-created")
    text = console.export_text()
    assert "deployments/demo-left deleted" in text and "never-created" not in text, text
    deadline = time.monotonic() + 180
    while not _gone(client, "deployments/demo-left"):
        assert time.monotonic() < deadline, "the demo's deployment was not removed"
        time.sleep(0.5)
