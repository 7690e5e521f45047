"""Helpers of the CLI tests: run `paddleray` in process, write job specs of the test entrypoints."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from paddleray.services.cli.main import app

WORKERS = Path(__file__).parents[1] / "e2e" / "cli" / "workers"
MODULE = "cli_test_entrypoints"


class Cli:
    """`paddleray ARGS` in process (typer's CliRunner), stdout and stderr apart."""

    def __init__(self, address: str | None, *options: str) -> None:
        self.address = address
        self.options = list(options)  # connection options put before every command (--stack-dir D)
        self.runner = CliRunner()

    def __call__(self, *args: str, env: dict | None = None):
        prefix = ["--address", self.address] if self.address else []
        return self.runner.invoke(app, [*prefix, *self.options, *args], env=env, catch_exceptions=False)


def ok(result):
    """A CLI result that succeeded and printed no traceback."""
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    return result


def ok_json(result):
    """The JSON a succeeded `-o json` command printed. A traceback inside it is data (a failed
    attempt's failure message): only stderr must have none."""
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout)


def created(result) -> str:
    """The name a succeeded `submit` or `sweep` printed: "jobs/ID" or "experiments/ID"."""
    match = re.search(r"created ((?:jobs|experiments)/\S+)", ok(result).stdout)
    assert match, result.stdout
    return match.group(1)


def job_spec(tmp_path: Path, function: str, config: dict, **fields) -> Path:
    """A job spec file running a test entrypoint."""
    spec = {
        "entrypoint": f"{MODULE}:{function}", "config": config, "env": {"PYTHONPATH": str(WORKERS)},
        "resources": {"cpus": 1}, **fields,
    }
    path = tmp_path / f"{function}.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    return path
