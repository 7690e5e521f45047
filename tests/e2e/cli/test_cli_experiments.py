"""`paddleray sweep` and `paddleray experiments ...` against a real stack."""

from __future__ import annotations

import json

import pytest
import yaml

from paddleray.services.cli.output import ExitCode
from support.cli import MODULE, WORKERS

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def _sweep(tmp_path, function: str, config: dict, space: dict, **fields):
    spec = {
        "trial": {"entrypoint": f"{MODULE}:{function}", "config": config, "env": {"PYTHONPATH": str(WORKERS)},
                  "resources": {"cpus": 1}},
        "search_space": space, "metric": "accuracy", "mode": "max", "max_concurrent_trials": 2, **fields,
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_sweep_watch_prints_a_table_with_integers_and_a_best_trial_that_agrees(cli, tmp_path):
    spec = _sweep(tmp_path, "slow", {"epochs": 2, "sleep_s": 0.05},
                  {"hidden_sizes": {"choice": [[128]]}, "sleep_s": {"grid": [0.05, 0.1]}})
    result = cli("sweep", str(spec), "--watch")
    assert result.exit_code == ExitCode.SUCCEEDED, result.stdout + result.stderr
    assert "hidden_sizes=[128]" in result.stdout and "128.0" not in result.stdout
    name = result.stdout.split()[1]
    assert name.startswith("experiments/")
    best_line = next(line for line in result.stdout.splitlines() if line.startswith("best trial: "))
    best_job, best_figure = best_line.split()[2], best_line.split()[4]
    row = next(line for line in result.stdout.splitlines() if line.startswith(best_job + " "))
    assert best_figure == f"accuracy={row.split()[-1]}"  # the table's "best accuracy" column

    listed = json.loads(cli("experiments", "list", "-o", "json").stdout)
    assert name in [e["name"] for e in listed]
    got = yaml.safe_load(cli("experiments", "get", name, "-o", "yaml").stdout)
    assert got["state"] == "EXPERIMENT_STATE_SUCCEEDED" and len(got["trials"]) == 2
    assert got["trial_template"]["spec"]["config"]["epochs"] == 2
    shown = cli("experiments", "get", name.removeprefix("experiments/"))
    assert shown.exit_code == 0 and "SUCCEEDED" in shown.stdout
    assert cli("experiments", "watch", name).exit_code == ExitCode.SUCCEEDED
    assert cli("watch", name).exit_code == ExitCode.SUCCEEDED
    streamed = cli("experiments", "watch", name, "-o", "json")
    final = json.loads(streamed.stdout.splitlines()[-1])
    assert final["name"] == name and len(final["trials"]) == 2


def test_cancel_an_experiment_and_its_exit_code(cli, tmp_path):
    spec = _sweep(tmp_path, "slow", {"sleep_s": 0.5}, {"lr": {"grid": [1, 2]}}, name="to-cancel")
    created = cli("sweep", str(spec))
    assert created.exit_code == 0, created.stderr
    cancelled = cli("experiments", "cancel", "to-cancel")
    assert cancelled.exit_code == 0 and "CANCELLED" in cancelled.stdout
    assert cli("experiments", "watch", "experiments/to-cancel").exit_code == ExitCode.CANCELLED


def test_a_malformed_sweep_names_file_line_and_field(cli, tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text("trial: {entrypoint: a.b:c}\nmetric: acc\nsearch_space:\n  lr: {gird: [1]}\n")
    result = cli("sweep", str(path))
    assert result.exit_code == ExitCode.USAGE
    assert result.stderr.strip() == f"error: {path}:4: search_space.lr.gird: Extra inputs are not permitted"
