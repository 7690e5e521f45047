"""What `paddleray up` gives each service: tokens passed on consistently, never blanked."""

from __future__ import annotations

import pytest

from paddleray.services.localstack.stack import _auth_env, redact_url

pytestmark = pytest.mark.unit


def test_one_token_for_the_stack_reaches_every_service_and_the_schedulers_trainer_client():
    env = _auth_env({}, "t0ken-for-the-whole-stack")
    assert env["PADDLERAY_SCHEDULER_AUTH_TOKEN"] == env["PADDLERAY_TRAINER_AUTH_TOKEN"] == "t0ken-for-the-whole-stack"
    assert env["PADDLERAY_EXPORTER_AUTH_TOKEN"] == "t0ken-for-the-whole-stack"
    assert env["PADDLERAY_SCHEDULER_TRAINER_AUTH_TOKEN"] == "t0ken-for-the-whole-stack"


def test_tokens_set_in_the_environment_are_kept_and_the_trainers_is_given_to_the_scheduler():
    environ = {"PADDLERAY_TRAINER_AUTH_TOKEN": "trainer-token-from-env"}
    env = _auth_env(environ, "")
    # Not blanked: the service keeps what the environment sets (env is laid over os.environ).
    assert "PADDLERAY_TRAINER_AUTH_TOKEN" not in env and "PADDLERAY_SCHEDULER_AUTH_TOKEN" not in env
    assert env["PADDLERAY_SCHEDULER_TRAINER_AUTH_TOKEN"] == "trainer-token-from-env"
    given = {**environ, "PADDLERAY_SCHEDULER_TRAINER_AUTH_TOKEN": "schedulers-own"}
    assert "PADDLERAY_SCHEDULER_TRAINER_AUTH_TOKEN" not in _auth_env(given, "")


def test_a_trainer_with_only_a_token_file_gets_a_generated_service_token_for_the_scheduler():
    env = _auth_env({"PADDLERAY_TRAINER_AUTH_TOKENS_FILE": "/secrets/tokens.yaml"}, "")
    token = env["PADDLERAY_TRAINER_AUTH_TOKEN"]
    assert len(token) >= 32 and env["PADDLERAY_SCHEDULER_TRAINER_AUTH_TOKEN"] == token
    assert _auth_env({}, "").get("PADDLERAY_SCHEDULER_TRAINER_AUTH_TOKEN") is None  # no auth: no token


def test_the_exporter_reads_jobs_with_a_credential_the_scheduler_accepts():
    assert _auth_env({}, "t0ken-for-the-whole-stack")["PADDLERAY_EXPORTER_SCHEDULER_AUTH_TOKEN"] == (
        "t0ken-for-the-whole-stack")
    env = _auth_env({"PADDLERAY_SCHEDULER_AUTH_TOKENS_FILE": "/secrets/tokens.yaml"}, "")
    token = env["PADDLERAY_SCHEDULER_AUTH_TOKEN"]  # a token of its own: an admin of the scheduler
    assert len(token) >= 32 and env["PADDLERAY_EXPORTER_SCHEDULER_AUTH_TOKEN"] == token
    given = {"PADDLERAY_SCHEDULER_AUTH_TOKEN": "scheduler-token", "PADDLERAY_EXPORTER_SCHEDULER_AUTH_TOKEN": "own"}
    assert "PADDLERAY_EXPORTER_SCHEDULER_AUTH_TOKEN" not in _auth_env(given, "")
    assert _auth_env({}, "").get("PADDLERAY_EXPORTER_SCHEDULER_AUTH_TOKEN") is None


def test_passwords_are_not_shown():
    assert redact_url("redis://:s3cret@store.example:6380/0") == "redis://:***@store.example:6380/0"
    assert redact_url("rediss://app:s3cret@redis:6380/1") == "rediss://app:***@redis:6380/1"
    assert redact_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    assert redact_url("redis://:s3cret@store.example/0") == "redis://:***@store.example/0"
