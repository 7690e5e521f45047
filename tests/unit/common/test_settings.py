"""Service settings come from the environment, and flags override it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

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
