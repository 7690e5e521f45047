"""Service settings come from the environment, and flags override it."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from paddleray.services.common.peers import PeerSettings
from paddleray.services.common.redis_client import RedisSettings
from paddleray.services.exporter.settings import ExporterSettings
from paddleray.services.scheduler.settings import SchedulerSettings
from paddleray.services.trainer.settings import TrainerSettings

pytestmark = pytest.mark.unit


def test_environment_with_the_service_prefix(monkeypatch):
    monkeypatch.setenv("PADDLERAY_SCHEDULER_PORT", "50061")
    monkeypatch.setenv("PADDLERAY_TRAINER_PORT", "50062")
    assert SchedulerSettings.from_env_and_flags("paddleray-scheduler", []).port == 50061
    assert TrainerSettings.from_env_and_flags("paddleray-trainer", []).port == 50062


def test_flags_override_the_environment(monkeypatch):
    monkeypatch.setenv("PADDLERAY_SCHEDULER_REDIS_URL", "redis://from-env:6379/0")
    settings = SchedulerSettings.from_env_and_flags(
        "paddleray-scheduler", ["--redis-url", "redis://from-flag:6379/1", "--log-level", "DEBUG"]
    )
    assert settings.redis_url == "redis://from-flag:6379/1"
    assert settings.log_level == "DEBUG"


def test_a_bad_value_names_the_setting():
    with pytest.raises(ValidationError, match="port"):
        SchedulerSettings.from_env_and_flags("paddleray-scheduler", ["--port", "70000"])


def test_each_peer_is_one_settings_type_under_its_flat_environment_names(monkeypatch, tmp_path):
    monkeypatch.setenv("PADDLERAY_SCHEDULER_TRAINER_ADDRESS", "trainer:50052")
    monkeypatch.setenv("PADDLERAY_SCHEDULER_TRAINER_AUTH_TOKEN", "scheduler-at-trainer")
    monkeypatch.setenv("PADDLERAY_SCHEDULER_TRAINER_TLS_CA_FILE", str(tmp_path / "ca.pem"))
    monkeypatch.setenv("PADDLERAY_EXPORTER_SCHEDULER_TLS_CA_FILE", str(tmp_path / "ca.pem"))
    monkeypatch.setenv("PADDLERAY_EXPORTER_SCHEDULER_TLS_SERVER_NAME", "scheduler.internal")
    scheduler = SchedulerSettings.from_env_and_flags("paddleray-scheduler", [])
    exporter = ExporterSettings.from_env_and_flags("paddleray-exporter", [])
    assert isinstance(scheduler.trainer, PeerSettings) and isinstance(exporter.scheduler, PeerSettings)
    assert scheduler.trainer.address == "trainer:50052" and scheduler.trainer.rpc_timeout_s == 30.0
    assert scheduler.trainer.auth_token.get_secret_value() == "scheduler-at-trainer"
    assert scheduler.trainer.tls_ca_file == exporter.scheduler.tls_ca_file == tmp_path / "ca.pem"
    # A peer setting left unset keeps that peer's own default.
    assert exporter.scheduler.address == "127.0.0.1:50051" and exporter.scheduler.tls_server_name == "scheduler.internal"
    # Keyword arguments take the same flat names.
    assert SchedulerSettings(trainer_address="t:1", trainer_rpc_timeout_s=5).trainer.rpc_timeout_s == 5


def test_a_mistyped_or_half_peer_setting_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("PADDLERAY_EXPORTER_SCHEDULER_TLS_CA", "ca.pem")
    with pytest.raises(ValidationError, match="tls_ca"):
        ExporterSettings.from_env_and_flags("paddleray-exporter", [])
    monkeypatch.delenv("PADDLERAY_EXPORTER_SCHEDULER_TLS_CA")
    monkeypatch.setenv("PADDLERAY_EXPORTER_SCHEDULER_TLS_CERT_FILE", str(tmp_path / "client.pem"))
    with pytest.raises(ValidationError, match="tls_cert_file and tls_key_file go together"):
        ExporterSettings.from_env_and_flags("paddleray-exporter", [])


@pytest.mark.parametrize("settings", [SchedulerSettings, ExporterSettings])
def test_both_stores_take_a_password_an_acl_user_and_tls_for_redis(monkeypatch, tmp_path, settings):
    prefix = settings.model_config["env_prefix"]
    monkeypatch.setenv(f"{prefix}REDIS_URL", "rediss://redis:6380/0")
    monkeypatch.setenv(f"{prefix}REDIS_PASSWORD", "not-in-the-url")
    monkeypatch.setenv(f"{prefix}REDIS_USERNAME", "paddleray")
    monkeypatch.setenv(f"{prefix}REDIS_TLS_CA_FILE", str(tmp_path / "ca.pem"))
    loaded = settings.from_env_and_flags("paddleray", [])
    assert isinstance(loaded, RedisSettings)
    assert loaded.redis_options() == {"password": "not-in-the-url", "username": "paddleray",
                                      "ssl_ca_certs": str(tmp_path / "ca.pem")}
    assert "not-in-the-url" not in repr(loaded)
    monkeypatch.setenv(f"{prefix}REDIS_URL", "redis://redis:6379/0")
    with pytest.raises(ValidationError, match="rediss://"):
        settings.from_env_and_flags("paddleray", [])


@pytest.mark.parametrize("settings", [SchedulerSettings, ExporterSettings, TrainerSettings])
def test_no_environment_name_can_reach_two_settings(settings):
    """Environment names are split after the name of a structured setting (a peer, tenant limits,
    a list): no other setting's name may start with it."""
    names = set(settings.model_fields)
    nested = {n for n, f in settings.model_fields.items() if isinstance(f.annotation, type) and issubclass(
        f.annotation, BaseModel) or str(f.annotation).startswith(("dict", "list"))}
    assert nested
    assert [(n, other) for n in nested for other in names if other.startswith(f"{n}_")] == []


@pytest.mark.parametrize("value", ["pkg.a, pkg.b", '["pkg.a", "pkg.b"]', "pkg.a,pkg.b,"])
def test_a_list_setting_takes_a_comma_list_or_json(monkeypatch, value):
    monkeypatch.setenv("PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST", value)
    monkeypatch.setenv("PADDLERAY_SCHEDULER_ENTRYPOINT_ALLOWLIST", value)
    monkeypatch.setenv("PADDLERAY_EXPORTER_BUILDER_ALLOWLIST", value)
    from paddleray.services.exporter.settings import ExporterSettings

    assert TrainerSettings.from_env_and_flags("t", []).entrypoint_allowlist == ["pkg.a", "pkg.b"]
    assert SchedulerSettings.from_env_and_flags("s", []).entrypoint_allowlist == ["pkg.a", "pkg.b"]
    assert ExporterSettings.from_env_and_flags("e", []).builder_allowlist == ["pkg.a", "pkg.b"]
    assert TrainerSettings.from_env_and_flags("t", ["--entrypoint-allowlist", "x,y"]).entrypoint_allowlist == ["x", "y"]


@pytest.mark.parametrize(("variable", "value", "expected"), [
    ("PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST", '["pkg.a"', "a comma-separated list (a,b) or a JSON array"),
    ("PADDLERAY_TRAINER_PORT", "fifty", "an integer"),
])
def test_a_bad_value_stops_start_up_with_one_line_naming_the_variable_and_format(monkeypatch, capsys, variable, value,
                                                                                expected):
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as stopped:
        TrainerSettings.for_main("paddleray-trainer", [])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"paddleray-trainer: {variable} (--")
    assert f"expected {expected}" in err


def test_a_bad_json_object_names_its_variable(monkeypatch, capsys):
    monkeypatch.setenv("PADDLERAY_SCHEDULER_TENANT_LIMITS", "{team-a: 4")
    with pytest.raises(SystemExit):
        SchedulerSettings.for_main("paddleray-scheduler", [])
    assert capsys.readouterr().err == ("paddleray-scheduler: PADDLERAY_SCHEDULER_TENANT_LIMITS (--tenant-limits): "
                                       "cannot be parsed; expected a JSON object\n")


def test_a_service_process_with_a_bad_value_prints_one_line(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PADDLERAY_SCHEDULER_ENTRYPOINT_ALLOWLIST": "[oops", "PADDLERAY_SCHEDULER_REDIS_URL": "redis://127.0.0.1:1/0"}
    done = subprocess.run([sys.executable, "-m", "paddleray.services.scheduler"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "paddleray-scheduler: PADDLERAY_SCHEDULER_ENTRYPOINT_ALLOWLIST (--entrypoint-allowlist): not a valid JSON array "
        "(Expecting value at column 2); expected a comma-separated list (a,b) or a JSON array ([\"a\", \"b\"])"]
