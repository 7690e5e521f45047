"""What the local stack hands each service in its environment."""

from __future__ import annotations

import pytest

from paddleray.services.localstack import stack

pytestmark = pytest.mark.unit


def _env(tmp_path, service: str) -> dict[str, str]:
    state = stack.StackState(state_dir=str(tmp_path), redis_url="redis://127.0.0.1:1/0", redis_pid=None,
                             ray_address="127.0.0.1:2", ray_pid=None, storage_root=str(tmp_path / "storage"))
    state.services["scheduler"] = stack.ServiceProcess("scheduler", "127.0.0.1:3", 0, "")
    state.services["trainer"] = stack.ServiceProcess("trainer", "127.0.0.1:4", 0, "")
    return stack._service_env(service, state, tmp_path / "ready", {})


def test_the_trainer_releases_idle_warm_groups_soon_so_exports_and_replicas_get_the_cpus(tmp_path, monkeypatch):
    monkeypatch.delenv("PADDLERAY_TRAINER_POOL_IDLE_TTL_S", raising=False)
    assert _env(tmp_path, "trainer")["PADDLERAY_TRAINER_POOL_IDLE_TTL_S"] == str(stack.LOCAL_POOL_IDLE_TTL_S)
    monkeypatch.setenv("PADDLERAY_TRAINER_POOL_IDLE_TTL_S", "120")
    assert _env(tmp_path, "trainer")["PADDLERAY_TRAINER_POOL_IDLE_TTL_S"] == "120"


def test_the_exporter_serves_inference_on_free_ports_not_serves_defaults(tmp_path, monkeypatch):
    monkeypatch.delenv("PADDLERAY_EXPORTER_SERVING_GRPC_PORT", raising=False)
    monkeypatch.delenv("PADDLERAY_EXPORTER_SERVING_HTTP_PORT", raising=False)
    env = _env(tmp_path, "exporter")
    ports = {int(env["PADDLERAY_EXPORTER_SERVING_GRPC_PORT"]), int(env["PADDLERAY_EXPORTER_SERVING_HTTP_PORT"])}
    assert len(ports) == 2 and not ports & {9000, 8000}
