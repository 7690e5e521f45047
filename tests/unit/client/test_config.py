"""Connection settings: arguments > environment > config-file context > local stack state file."""

from __future__ import annotations

import json

import pytest

from paddleray.services.client import ConfigError, NotConfigured, resolve

pytestmark = pytest.mark.unit


def _state(directory, scheduler="127.0.0.1:1111", exporter="127.0.0.1:2222"):
    state_dir = directory / ".paddleray" / "stack"
    state_dir.mkdir(parents=True)
    services = {"scheduler": {"address": scheduler}, "exporter": {"address": exporter}}
    (state_dir / "state.json").write_text(json.dumps({"services": services}))
    return state_dir


def test_the_local_stack_is_found_from_any_subdirectory(tmp_path):
    _state(tmp_path)
    deep = tmp_path / "src" / "pkg"
    deep.mkdir(parents=True)
    config = resolve(env={}, cwd=deep, config_file=None)
    assert (config.address, config.exporter) == ("127.0.0.1:1111", "127.0.0.1:2222")
    assert "local stack" in config.source


def test_nothing_configured_says_what_to_do(tmp_path):
    with pytest.raises(NotConfigured, match="--address or set PADDLERAY_ADDRESS"):
        resolve(env={}, cwd=tmp_path)


def test_arguments_beat_environment_beat_the_stack(tmp_path):
    _state(tmp_path)
    env = {"PADDLERAY_ADDRESS": "env:1", "PADDLERAY_TOKEN": "t-env"}
    from_env = resolve(env=env, cwd=tmp_path)
    assert (from_env.address, from_env.token) == ("env:1", "t-env")
    assert from_env.exporter == "127.0.0.1:2222"  # what env does not set still comes from the stack
    given = resolve(address="arg:2", env=env, cwd=tmp_path)
    assert (given.address, given.token) == ("arg:2", "t-env")


def test_config_file_contexts_like_kubectl(tmp_path):
    token = tmp_path / "prod.token"
    token.write_text("s3cret\n")
    ca = tmp_path / "ca.pem"
    ca.write_text("pem")
    path = tmp_path / "config.yaml"
    path.write_text(
        "current-context: prod\n"
        "contexts:\n"
        f"  prod: {{address: 'sched.example:443', tls_ca: '{ca}', token_file: '{token}'}}\n"
        "  dev: {address: 'dev:50051', token: plain}\n"
    )
    prod = resolve(env={"PADDLERAY_CONFIG": str(path)}, cwd=tmp_path)
    assert (prod.address, prod.token, prod.tls.ca) == ("sched.example:443", "s3cret", str(ca))
    dev = resolve(context="dev", config_file=path, env={}, cwd=tmp_path)
    assert (dev.address, dev.token, dev.tls) == ("dev:50051", "plain", None)
    also_dev = resolve(env={"PADDLERAY_CONFIG": str(path), "PADDLERAY_CONTEXT": "dev"}, cwd=tmp_path)
    assert also_dev.address == "dev:50051"


@pytest.mark.parametrize("text, message", [
    ("contexts: {a: {address: x}\n", r"config.yaml:2: not valid YAML"),
    ("current-context: b\ncontexts: {a: {address: x}}\n", r"no context 'b' \(contexts: a\)"),
    ("current-context: a\ncontexts: {a: {adress: x}}\n", r"contexts.a: unknown key\(s\) adress"),
    ("current-context: a\ncontexts: {a: {address: x, tls_cert: c.pem}}\n", r"tls_cert and tls_key"),
])
def test_a_broken_config_file_is_one_clear_line(tmp_path, text, message):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        resolve(config_file=path, env={}, cwd=tmp_path)


def test_a_named_state_dir_that_has_no_stack_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="no local stack state"):
        resolve(state_dir=tmp_path / "nothing", env={}, cwd=tmp_path)


def test_a_context_whose_token_env_is_unset_is_an_error_naming_it(tmp_path, monkeypatch):
    config = tmp_path / "config.yaml"
    config.write_text("current-context: prod\ncontexts:\n  prod: {address: 'h:1', token_env: PR_TEST_TOKEN}\n")
    monkeypatch.delenv("PR_TEST_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="contexts.prod.token_env: the variable PR_TEST_TOKEN is not set"):
        resolve(config_file=config, env={}, cwd=tmp_path)
    monkeypatch.setenv("PR_TEST_TOKEN", "s3cret")
    assert resolve(config_file=config, env={}, cwd=tmp_path).token == "s3cret"
