"""How the CLI finds the services: a stack from any subdirectory, --address / env, config-file
contexts, bearer tokens; and connection errors as their own exit code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from paddleray.services.cli.demo import demo_stack
from paddleray.services.cli.output import ExitCode
from paddleray.services.localstack.ports import free_port
from support.cli import Cli
from support.scheduler import SchedulerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def test_the_stack_is_found_from_a_subdirectory_of_where_it_was_started(cli_stack, tmp_path, monkeypatch):
    project = tmp_path / "project"
    shutil.copytree(cli_stack.state_dir, project / ".paddleray" / "stack", ignore=shutil.ignore_patterns("storage", "redis"))
    (project / "src" / "deep").mkdir(parents=True)
    monkeypatch.chdir(project / "src" / "deep")
    monkeypatch.delenv("PADDLERAY_ADDRESS", raising=False)
    (tmp_path / "empty.yaml").write_text("contexts: {}\n")
    monkeypatch.setenv("PADDLERAY_CONFIG", str(tmp_path / "empty.yaml"))
    result = Cli(None)("jobs", "list")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("JOB")


def test_address_from_the_environment_and_from_a_context(cli_stack, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    address = cli_stack.address("scheduler")
    assert Cli(None)("jobs", "list", env={"PADDLERAY_ADDRESS": address}).exit_code == 0
    config = tmp_path / "config.yaml"
    config.write_text(f"current-context: nowhere\ncontexts:\n  nowhere: {{address: '127.0.0.1:{free_port()}'}}\n"
                      f"  here: {{address: '{address}'}}\n")
    env = {"PADDLERAY_CONFIG": str(config), "PADDLERAY_ADDRESS": ""}
    assert Cli(None)("--context", "here", "jobs", "list", env=env).exit_code == 0
    down = Cli(None)("--request-timeout", "3", "jobs", "list", env=env)
    assert down.exit_code == ExitCode.UNREACHABLE
    assert down.stderr.startswith("error: cannot reach 127.0.0.1:") and "Traceback" not in down.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("contexts: [\n")
    bad = Cli(None)("jobs", "list", env={"PADDLERAY_CONFIG": str(broken)})
    assert bad.exit_code == ExitCode.USAGE and f"{broken}:2: not valid YAML" in bad.stderr


def test_nothing_to_connect_to_is_a_connection_error_with_advice(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.yaml").write_text("contexts: {}\n")
    result = Cli(None)("jobs", "list", env={"PADDLERAY_ADDRESS": "", "PADDLERAY_CONFIG": str(tmp_path / "empty.yaml")})
    assert result.exit_code == ExitCode.UNREACHABLE
    assert "--address" in result.stderr and "paddleray up" in result.stderr


def test_a_token_from_flag_env_or_token_file(redis_server, tmp_path, cli_stack):
    # A database of its own on the stack's Redis (the redis_url fixture would flush the stack's).
    redis_url = redis_server.url.rsplit("/", 1)[0] + "/3"
    scheduler = SchedulerProcess(redis_url, cli_stack.address("trainer"), tmp_path, auth_token="s3cret")
    try:
        scheduler.start_until_serving()
        cli = Cli(scheduler.address)
        refused = cli("jobs", "list")
        assert refused.exit_code == ExitCode.REJECTED and "UNAUTHENTICATED" in refused.stderr
        assert cli("--token", "s3cret", "jobs", "list").exit_code == 0
        assert cli("jobs", "list", env={"PADDLERAY_TOKEN": "s3cret"}).exit_code == 0
        (tmp_path / "token").write_text("s3cret\n")
        config = tmp_path / "config.yaml"
        config.write_text(json.dumps({"current-context": "secure", "contexts": {
            "secure": {"address": scheduler.address, "token_file": str(tmp_path / "token")}}}))
        assert Cli(None)("--config-file", str(config), "jobs", "list", env={"PADDLERAY_ADDRESS": ""}).exit_code == 0
    finally:
        scheduler.stop()


def test_status_as_json(cli_stack, tmp_path):
    result = Cli(None)("status", "--state-dir", cli_stack.state_dir, "-o", "json")
    assert result.exit_code == 0, result.stdout
    status = json.loads(result.stdout)
    assert status["healthy"] is True and set(status["services"]) == {"trainer", "scheduler", "exporter"}
    missing = Cli(None)("status", "--state-dir", str(tmp_path), "-o", "json")
    assert missing.exit_code == ExitCode.UNREACHABLE and json.loads(missing.stdout) == {"running": False}


def test_demo_uses_a_running_stack_and_leaves_it_running(cli_stack):
    with demo_stack(Path(cli_stack.state_dir), keep=False) as state:
        assert state.address("scheduler") == cli_stack.address("scheduler")
    assert all(cli_stack.serving(name) for name in cli_stack.services)


def test_status_honours_stack_dir_and_a_contexts_state_dir(cli_stack, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no .paddleray/stack here or above
    monkeypatch.delenv("PADDLERAY_ADDRESS", raising=False)
    (tmp_path / "empty.yaml").write_text("contexts: {}\n")
    monkeypatch.setenv("PADDLERAY_CONFIG", str(tmp_path / "empty.yaml"))
    assert Cli(None)("status").exit_code == ExitCode.UNREACHABLE
    given = Cli(None, "--stack-dir", str(cli_stack.state_dir))("status")
    assert given.exit_code == 0, given.stdout + given.stderr
    assert cli_stack.address("scheduler") in given.stdout
    config = tmp_path / "config.yaml"
    config.write_text(f"current-context: local\ncontexts:\n  local: {{state_dir: '{cli_stack.state_dir}'}}\n")
    monkeypatch.setenv("PADDLERAY_CONFIG", str(config))
    from_context = Cli(None)("status")
    assert from_context.exit_code == 0 and cli_stack.address("scheduler") in from_context.stdout
