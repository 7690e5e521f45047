"""The exporter process and its Ray cluster, on a Ray head of the test's own that it stops and starts.

A Ray head restart used to kill the exporter (Ray's WrongClusterID fatal check, when a driver's
GCS comes back as a new cluster). Now, as the trainer (services/common/ray_connection.py): while
the head is away the exporter says NOT_SERVING, ExportModel answers UNAVAILABLE, the export in
flight ends FAILED (WORKER_LOST) and the deployment UNHEALTHY with the reason; with
ray_lost_exit false (by default the process exits instead and its supervisor starts a fresh one:
tests/reliability/test_head_crash_loop.py) the process lives
on, connects to the restarted head by itself, serves again, and the reconciler deploys the
recorded deployment again on the new cluster (Serve's state died with the old head), which
answers inference again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import numpy as np
import pytest
import redis.asyncio as aioredis
from grpc_health.v1 import health_pb2, health_pb2_grpc

from paddleray.common.v1 import common_pb2
from paddleray.exporter.v1 import deployment_pb2, exporter_service_pb2_grpc, model_pb2
from paddleray.exporter.v1 import exporter_service_pb2 as es
from paddleray.inference.v2 import grpc_service_pb2_grpc
from paddleray.services.exporter.serving.replica import codec
from paddleray.services.exporter.store.registry_store import RegistryStore
from paddleray.services.localstack.ray_head import RayHead
from support import free_port, wait_until
from support.exporter import BUILDERS, WORKERS, ExporterClient, ExporterProcess, linear_checkpoint, ready_version
from support.serving import export_model, rest_infer

pytestmark = pytest.mark.e2e
D = deployment_pb2.DeploymentState
S = model_pb2.ModelVersionState
# Bounds, not expectations: on a loaded 2-core machine a fresh head's raylet registers late, and
# Serve's controller, proxy, ingress and model replica each start a Python worker.
HEAD_START_S = 600
DEPLOY_S = 900
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
def own_head(tmp_path):
    # On a port fixed up front: the restarted head keeps the address the exporter was given.
    head = RayHead(num_cpus=2, port=free_port(), log_file=tmp_path / "ray-head.log")
    yield head
    head.stop()


def _status(exporter: ExporterProcess) -> int | None:
    """The health status, or None while the server does not answer; fails if the process died."""
    if exporter.proc.poll() is not None:
        raise AssertionError(f"the exporter exited with {exporter.proc.returncode}:\n{exporter.log.read_text()[-4000:]}")
    try:
        with grpc.insecure_channel(exporter.address) as channel:
            return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2).status
    except grpc.RpcError:
        return None


def _wait_status(exporter: ExporterProcess, wanted: int, timeout: float) -> None:
    try:
        wait_until(lambda: _status(exporter) == wanted, timeout=timeout, interval=0.5, message=f"health {wanted}")
    except TimeoutError:
        raise AssertionError(f"health never became {wanted}; the exporter's log:\n{exporter.log.read_text()[-4000:]}") \
            from None


async def _record_ready_version(redis_url: str, storage_root: Path) -> int:
    client = aioredis.Redis.from_url(redis_url)
    try:
        return await ready_version(RegistryStore(client), storage_root, "mlp")
    finally:
        await client.aclose()


def _wait_deployment(stub, name: str, state: int, exporter: ExporterProcess) -> deployment_pb2.Deployment:
    def reached():
        _status(exporter)  # the process is alive
        deployment = stub.GetDeployment(es.GetDeploymentRequest(name=name), timeout=30).deployment
        return deployment if deployment.state == state else None

    try:
        return wait_until(reached, timeout=DEPLOY_S, interval=1.0, message=f"{name} to be {D.Name(state)}")
    except TimeoutError:
        raise AssertionError(f"{name} never became {D.Name(state)}; the exporter's log:\n"
                             f"{exporter.log.read_text()[-4000:]}") from None


def _infer(endpoint: str) -> list[float]:
    """At the deployment's gRPC endpoint, with the model's `application` metadata."""
    with grpc.insecure_channel(endpoint) as channel:
        stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
        response = stub.ModelInfer(codec.encode_request("mlp", {"x": np.ones((1, 64), np.float32)}), timeout=60,
                                   metadata=(("application", "mlp"),))
    return codec.decode_response(response)["fetch_name_0"].ravel().tolist()


def _code(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value.code()


@pytest.mark.timeout(3600)
def test_a_head_restart_fails_the_export_in_flight_and_the_exporter_reconnects_and_deploys_again(
        own_head, redis_url, tmp_path):
    storage = tmp_path / "storage"
    inference_port = free_port()
    own_head.start()
    exporter = ExporterProcess(redis_url, own_head.address, storage, tmp_path, serving_grpc_port=inference_port,
                               ray_probe_interval_s=0.5, ray_lost_after_s=3, ray_retry_interval_s=1,
                               reconcile_interval_s=1, ray_lost_exit="false")
    try:
        _wait_status(exporter, SERVING, HEAD_START_S)
        # A READY version with a real artifact (exported here, not on the cluster) and its deployment.
        number = asyncio.run(_record_ready_version(redis_url, storage))
        export_model(storage / "models" / "mlp" / "versions" / str(number), "mlp", seed=3, version=number)
        with grpc.insecure_channel(exporter.address) as channel:
            stub = exporter_service_pb2_grpc.ExporterServiceStub(channel)
            client = ExporterClient(stub)
            deployment = deployment_pb2.Deployment(
                serving_name="mlp", resources_per_replica=common_pb2.Resources(num_cpus=0.1),
                traffic=[deployment_pb2.TrafficTarget(model_version=f"models/mlp/versions/{number}", percent=100)])
            name = stub.CreateDeployment(es.CreateDeploymentRequest(deployment_id="mlp", deployment=deployment),
                                         timeout=30).deployment.name
            healthy = _wait_deployment(stub, name, D.DEPLOYMENT_STATE_HEALTHY, exporter)
            assert healthy.endpoint == f"127.0.0.1:{inference_port}"
            before = _infer(healthy.endpoint)
            assert rest_infer(healthy.http_endpoint, {"x": np.ones((1, 64), np.float32)})[1]["fetch_name_0"].ravel() \
                == pytest.approx(before, rel=1e-5)
            # An export running on the cluster when it goes (the builder sleeps for a minute).
            checkpoint = linear_checkpoint(storage)
            env = common_pb2.RuntimeEnv(env_vars={"PYTHONPATH": str(WORKERS)})
            slow = client.export(parent="models/slow", checkpoint_uri=checkpoint,
                                 model_builder=f"{BUILDERS}:build_slow", runtime_env=env)
            assert slow.state == S.MODEL_VERSION_STATE_EXPORTING

            own_head.stop()
            _wait_status(exporter, NOT_SERVING, 60)
            lost = client.wait_done(slow.name, timeout=120)
            assert lost.state == S.MODEL_VERSION_STATE_FAILED, lost.state_reason
            assert lost.failure.kind == common_pb2.FAILURE_KIND_WORKER_LOST, lost.state_reason
            # While the head is away: ExportModel needs Ray and says so; reads answer from Redis.
            assert _code(lambda: client.export(parent="models/slow", checkpoint_uri=checkpoint,
                                               model_builder=f"{BUILDERS}:build_slow", runtime_env=env)) \
                == grpc.StatusCode.UNAVAILABLE
            away = _wait_deployment(stub, name, D.DEPLOYMENT_STATE_UNHEALTHY, exporter)
            assert "was lost" in away.state_reason, away.state_reason
            assert _status(exporter) == NOT_SERVING

            own_head.start()
            _wait_status(exporter, SERVING, HEAD_START_S)
            # Serve's apps died with the old head: the reconciler deployed them again by itself.
            again = _wait_deployment(stub, name, D.DEPLOYMENT_STATE_HEALTHY, exporter)
            # On the same endpoints: the head's ports were free again when Serve started there.
            assert (again.endpoint, again.http_endpoint) == (healthy.endpoint, healthy.http_endpoint)
            assert _infer(again.endpoint) == before
            assert client.get(slow.name).state == S.MODEL_VERSION_STATE_FAILED
        assert _status(exporter) == SERVING
    finally:
        exporter.stop()
