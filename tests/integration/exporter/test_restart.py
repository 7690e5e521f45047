"""The exporter as a real process: SERVING once Redis and Ray answer, and an exporter killed in
the middle of an export leaves no version stuck in EXPORTING (the next one fails it, with why)."""

from __future__ import annotations

import time

import grpc
import pytest

from paddleray.common.v1 import common_pb2
from paddleray.exporter.v1 import exporter_service_pb2 as es
from paddleray.exporter.v1 import exporter_service_pb2_grpc, model_pb2
from paddleray.services.localstack.health import serving
from support import free_port, wait_until
from support.exporter import BUILDERS, WORKERS, ExporterClient, ExporterProcess, linear_checkpoint

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
S = model_pb2.ModelVersionState


@pytest.fixture
def processes(ray_head, redis_url, tmp_path):
    started: list[ExporterProcess] = []

    def start() -> ExporterProcess:
        process = ExporterProcess(redis_url, ray_head.address, tmp_path / "storage", tmp_path)
        started.append(process)
        process.wait_serving()
        return process

    yield start
    for process in started:
        process.stop()


def test_an_exporter_killed_mid_export_leaves_the_version_failed_not_exporting(processes, tmp_path, fault_figures):
    first = processes()
    checkpoint = linear_checkpoint(tmp_path / "storage")
    with grpc.insecure_channel(first.address) as channel:
        client = ExporterClient(exporter_service_pb2_grpc.ExporterServiceStub(channel))
        version = client.export(parent="models/slow", checkpoint_uri=checkpoint, model_builder=f"{BUILDERS}:build_slow",
                                runtime_env=common_pb2.RuntimeEnv(env_vars={"PYTHONPATH": str(WORKERS)}))
        assert version.state == S.MODEL_VERSION_STATE_EXPORTING
    first.kill()
    killed = time.monotonic()
    second = processes()
    serving_s = time.monotonic() - killed
    with grpc.insecure_channel(second.address) as channel:
        client = ExporterClient(exporter_service_pb2_grpc.ExporterServiceStub(channel))
        done = client.wait_done(version.name, timeout=60)
    failed_s = time.monotonic() - killed
    assert done.state == S.MODEL_VERSION_STATE_FAILED
    assert "went away before it finished" in done.state_reason, done.state_reason
    assert done.failure.kind == common_pb2.FAILURE_KIND_WORKER_LOST
    assert not (tmp_path / "storage" / "models" / "slow" / "versions" / "1" / "manifest.json").exists()
    fault_figures.record(faults_injected=1, exports_in_flight=1,
                         versions_stuck_exporting=int(done.state == S.MODEL_VERSION_STATE_EXPORTING),
                         kill_to_new_exporter_serving_s=round(serving_s, 2), kill_to_version_failed_s=round(failed_s, 2))


def test_the_exporter_is_not_serving_while_redis_is_unreachable(ray_head, tmp_path):
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    process = ExporterProcess(dead_redis, ray_head.address, tmp_path / "storage", tmp_path, port=free_port())
    try:
        wait_until(lambda: _health_answers(process), timeout=120, interval=0.2, message="the exporter's health server")
        assert not serving(process.address)
        with grpc.insecure_channel(process.address) as channel:
            stub = exporter_service_pb2_grpc.ExporterServiceStub(channel)
            with pytest.raises(grpc.RpcError) as info:
                stub.GetModel(es.GetModelRequest(name="models/x"), timeout=10)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        process.stop()


def _health_answers(process: ExporterProcess) -> bool:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    assert process.proc.poll() is None, process.log.read_text()
    try:
        with grpc.insecure_channel(process.address) as channel:
            status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1).status
    except grpc.RpcError:
        return False
    return status == health_pb2.HealthCheckResponse.NOT_SERVING


def test_the_exporter_is_not_serving_and_exports_nothing_while_ray_is_unreachable(redis_url, tmp_path):
    process = ExporterProcess(redis_url, f"127.0.0.1:{free_port()}", tmp_path / "storage", tmp_path, port=free_port())
    try:
        wait_until(lambda: _health_answers(process), timeout=120, interval=0.2, message="the exporter's health server")
        assert not serving(process.address)
        with grpc.insecure_channel(process.address) as channel:
            client = ExporterClient(exporter_service_pb2_grpc.ExporterServiceStub(channel))
            with pytest.raises(grpc.RpcError) as info:
                client.export(parent="models/x", checkpoint_uri=linear_checkpoint(tmp_path / "storage"),
                              model_builder=f"{BUILDERS}:build_linear")
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE and "Ray cluster" in info.value.details()
        assert process.proc.poll() is None  # still up, waiting for the cluster
    finally:
        process.stop()
