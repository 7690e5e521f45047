"""Issue 21 point 4: a Redis that comes back empty does not tear serving down.

An exporter (in-process, behind a real gRPC server) serves a real model on Ray Serve (the
session's head) from its own redis-server (AOF). Redis is then SIGKILLed and started on its
port with an empty data directory (a failover to an empty replica, a lost volume): Serve keeps
the model's application RUNNING, the exporter says NOT_SERVING and refuses deployment changes,
with the reason logged. The old data restored, it serves as before; lost again and confirmed
by an operator (`python -m paddleray.services.exporter.store.store_guard confirm`), the store's
(empty) state is applied: the model is deleted from Serve.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import grpc
import pytest

from paddleray.common.v1 import common_pb2
from paddleray.exporter.v1 import deployment_pb2, exporter_service_pb2_grpc
from paddleray.exporter.v1 import exporter_service_pb2 as es
from paddleray.services.exporter.settings import ExporterSettings
from paddleray.services.localstack.redis_process import RedisProcess
from support import free_port, wait_until
from support.exporter import EXAMPLES, exporter_thread, servable_version

pytestmark = [pytest.mark.timeout(300)]
D = deployment_pb2.DeploymentState
NAME = "guarded-digits"


def _apps() -> dict[str, str]:
    """The model's Serve applications and their status."""
    from ray import serve

    return {name: str(getattr(app.status, "value", app.status))
            for name, app in serve.status().applications.items() if NAME in name}


def test_an_empty_redis_freezes_serving_until_restored_or_confirmed(ray_cluster, tmp_path, caplog, fault_figures):
    data, empty = tmp_path / "redis", tmp_path / "redis-empty"
    store = RedisProcess(data, durable=True).start()
    storage = tmp_path / "storage"
    settings = ExporterSettings(
        port=0, redis_url=store.url, ray_address=ray_cluster, storage_root=storage, builder_allowlist=[EXAMPLES],
        scheduler_address="", serving_grpc_port=free_port(), serving_http_port=free_port(), reconcile_interval_s=0.5,
        health_interval_s=0.5,
    )
    thread = exporter_thread(settings)
    caplog.set_level(logging.ERROR, logger="paddleray.services.exporter.store.store_guard")
    lost_store = None

    def ready() -> bool:
        """The exporter's readiness, which its health service reports (run_service checks it)."""
        return thread.run(thread.app.ready())

    try:
        version = thread.run(servable_version(thread.app.store, storage, "guarded"))
        channel = grpc.insecure_channel(thread.address)
        stub = exporter_service_pb2_grpc.ExporterServiceStub(channel)
        deployment = deployment_pb2.Deployment(serving_name=NAME, num_replicas=1,
                                               resources_per_replica=common_pb2.Resources(num_cpus=0.1),
                                               traffic=[deployment_pb2.TrafficTarget(model_version=version, percent=100)])
        stub.CreateDeployment(es.CreateDeploymentRequest(deployment_id="guarded", deployment=deployment), timeout=10)
        wait_until(lambda: stub.GetDeployment(es.GetDeploymentRequest(name="deployments/guarded"), timeout=10)
                   .deployment.state == D.DEPLOYMENT_STATE_HEALTHY, timeout=180, interval=0.5, message="HEALTHY")
        served = _apps()
        assert served and set(served.values()) == {"RUNNING"}, served

        def lose_the_store() -> RedisProcess:
            store.kill()
            return RedisProcess(empty, durable=True, port=store.port).start()

        def frozen_for(seconds: float) -> None:
            """Serve keeps the model the whole time; the exporter says NOT_SERVING and refuses changes."""
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                assert _apps() == served, "an application of the model was changed or deleted"
                time.sleep(0.25)
            assert not ready(), "SERVING with its store lost"
            with pytest.raises(grpc.RpcError) as refused:
                stub.CreateDeployment(es.CreateDeploymentRequest(deployment_id="another", deployment=deployment),
                                      timeout=10)
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION, refused.value.details()
            assert "looks lost" in refused.value.details()

        # 1. Redis back empty: nothing deleted for far longer than the 3-8 s it took before.
        lost_store = lose_the_store()
        lost_at = time.monotonic()
        frozen_for(10)
        assert any("serving frozen" in r.getMessage() and "lost its installation marker" in r.getMessage()
                   for r in caplog.records), [r.getMessage() for r in caplog.records]

        # 2. The store restored (the old data): SERVING again, the deployment as it was.
        lost_store.kill()
        store.start()
        wait_until(lambda: ready(), timeout=30, interval=0.2, message="SERVING once restored")
        restored_s = time.monotonic() - lost_at
        shown = stub.GetDeployment(es.GetDeploymentRequest(name="deployments/guarded"), timeout=10).deployment
        assert shown.state == D.DEPLOYMENT_STATE_HEALTHY, shown
        assert _apps() == served

        # 3. Lost again, and an operator confirms the empty store as meant: then it is applied.
        lost_store = lose_the_store()
        frozen_for(3)
        env = {**os.environ, "PADDLERAY_EXPORTER_REDIS_URL": lost_store.url}
        confirmed = subprocess.run([sys.executable, "-m", "paddleray.services.exporter.store.store_guard", "confirm"],
                                   env=env, capture_output=True, text=True, timeout=60)
        assert confirmed.returncode == 0 and "confirmed" in confirmed.stdout, confirmed
        wait_until(lambda: not _apps(), timeout=60, interval=0.25, message="the model deleted once confirmed")
        wait_until(lambda: ready(), timeout=30, interval=0.2, message="SERVING once confirmed")
        channel.close()
        fault_figures.record(faults_injected=2, served_models=1, served_models_deleted_while_lost=0,
                             seconds_frozen_without_a_delete=10, lost_to_restored_serving_s=round(restored_s, 2))
    finally:
        thread.run(thread.app.controller.stop(shutdown_serve=True), timeout=120)
        thread.stop()
        for process in (lost_store, store):
            if process is not None:
                process.stop()
