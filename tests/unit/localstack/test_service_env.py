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


def test_on_a_tls_stack_every_service_to_service_client_checks_its_peer_with_the_stack_ca(tmp_path):
    tls = stack.StackTls(tmp_path / "ca.pem", tmp_path / "server.pem", tmp_path / "server.key")
    env = stack._tls_env(tls)
    assert env["PADDLERAY_SCHEDULER_TRAINER_TLS_CA_FILE"] == env["PADDLERAY_EXPORTER_SCHEDULER_TLS_CA_FILE"] == str(
        tls.ca_file)


def test_a_named_redis_reaches_both_stores_with_its_password_and_ca_and_its_password_is_not_saved(tmp_path):
    state = stack.StackState(state_dir=str(tmp_path), redis_url="rediss://127.0.0.1:1/0", redis_pid=None,
                             ray_address="127.0.0.1:2", ray_pid=None, storage_root=str(tmp_path / "storage"),
                             redis_tls_ca_file=str(tmp_path / "redis-ca.pem"))
    state.services["scheduler"] = stack.ServiceProcess("scheduler", "127.0.0.1:3", 0, "")
    state.services["trainer"] = stack.ServiceProcess("trainer", "127.0.0.1:4", 0, "")
    given = stack._redis_password_env(state.redis("redis-pw"))
    for service in ("scheduler", "exporter"):
        env = stack._service_env(service, state, tmp_path / "ready", given)
        prefix = f"PADDLERAY_{service.upper()}_"
        assert env[prefix + "REDIS_URL"] == "rediss://127.0.0.1:1/0"
        assert env[prefix + "REDIS_TLS_CA_FILE"] == str(tmp_path / "redis-ca.pem")
        assert env[prefix + "REDIS_PASSWORD"] == "redis-pw"
    assert "redis-pw" not in state.save().read_text()


def test_a_service_that_exits_during_start_up_is_one_line_with_its_logs_last_line(tmp_path):
    log = tmp_path / "trainer.log"
    log.write_text("starting\npaddleray-trainer: PADDLERAY_TRAINER_PORT (--port): bad; expected an integer\n\n")
    error = stack.exited_during_start_up(stack.ServiceProcess("trainer", "", 1, str(log)))
    assert str(error) == ("trainer exited during start-up: paddleray-trainer: PADDLERAY_TRAINER_PORT (--port): bad; "
                          f"expected an integer (log: {log})")
