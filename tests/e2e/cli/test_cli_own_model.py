"""A user's own model all the way through the CLI, as a new user would take it (issue 19): a
project written in a temporary directory outside the repo, importable by no service and under
no allowlist, holding the complete training function of docs/context.md copied as it is.

ship -> train on 2 ranks -> a run on the warm workers that run left fails after epoch 2 and its
retry ends with the identical loss -> a sweep with ASHA -> init_from its best trial -> export
through the CLI (Paddle Inference + ONNX, validation figures shown; from the job, and from its
checkpoint with the project directory as the builder's code) -> deploy -> predict through the
CLI and the stock tritonclient, equal to the project's own dynamic model on the same rows ->
delete."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from paddleray.services.cli.output import ExitCode
from paddleray.services.client import Client, ServiceError
from support.cli import created, ok, ok_json
from support.triton import triton_python

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
DOC = Path(__file__).parents[3] / "docs" / "context.md"
MODEL = "own-digits"
# Fails the first attempt once a given epoch is reported; the documented function, unchanged, under it.
FLAKY = '''"""my_project/flaky.py -- the documented function, failing its first attempt after an epoch."""

import os

from my_project.train_digits import build_model, train as documented_train  # noqa: F401 - build_model: exports


class FailAfter:
    def __init__(self, ctx, epoch):
        self._ctx, self._epoch = ctx, epoch

    def __getattr__(self, name):
        return getattr(self._ctx, name)

    def report(self, metrics, checkpoint=None):
        self._ctx.report(metrics, checkpoint=checkpoint)
        if metrics["epoch"] == self._epoch:
            raise RuntimeError(f"injected failure after epoch {self._epoch}")


def train(config, ctx):
    print(f"worker pid {os.getpid()}", flush=True)
    if config.get("fail_after_epoch") and ctx.latest_checkpoint is None:
        ctx = FailAfter(ctx, config["fail_after_epoch"])
    return documented_train(config, ctx)
'''


@pytest.fixture
def cleanup(cli_stack):
    yield
    with Client.connect(address=cli_stack.address("scheduler"), state_dir=cli_stack.state_dir) as client:
        try:
            client.exporter.delete_deployment(MODEL)
            client.exporter.wait_deleted(MODEL, timeout=180)
        except ServiceError:
            pass


def _project(root: Path) -> Path:
    (root / "my_project").mkdir(parents=True)
    (root / "my_project" / "__init__.py").write_text("")
    python = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    (root / "my_project" / "train_digits.py").write_text(python[0])  # copied as it is
    (root / "my_project" / "flaky.py").write_text(FLAKY)
    return root


def _spec(path: Path, **fields) -> Path:
    # Beside the project, not in it: a spec in the project would change the package's content.
    path.write_text(yaml.safe_dump({"working_dir": "../project", "resources": {"cpus": 1}, **fields}))
    return path


def _sweep_spec(path: Path) -> Path:
    trial = {"entrypoint": "my_project.train_digits:train", "working_dir": "../project", "resources": {"cpus": 1},
             "config": {"epochs": 3, "hidden_sizes": [64]}}
    path.write_text(yaml.safe_dump({
        "trial": trial, "search_space": {"lr": {"grid": [0.003, 0.3]}}, "metric": "accuracy", "mode": "max",
        "max_concurrent_trials": 2, "early_stopping": {"asha": {"max_t": 3, "grace_period": 1}},
    }))
    return path


def _pids(cli, job: str, attempt: int) -> set[str]:
    logs = cli("logs", job, "--attempt", str(attempt))
    assert logs.exit_code == 0, logs.stderr
    lines = logs.stdout
    return set(re.findall(r"worker pid (\d+)", lines))


def _dynamic_model(project: Path, checkpoint: str, rows: np.ndarray) -> np.ndarray:
    """The project's own model, built by its own code in this process, on the exported weights."""
    import paddle

    spec = importlib.util.spec_from_file_location("own_train_digits", project / "my_project" / "train_digits.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.build_model({})
    model.set_state_dict(paddle.load(str(Path(checkpoint) / "model.pdparams")))
    model.eval()
    return model(paddle.to_tensor(rows)).numpy()


def test_an_own_project_ships_trains_retries_sweeps_fine_tunes_exports_serves_and_is_deleted(
        serving_cli, cleanup, tmp_path):
    cli = serving_cli
    project = _project(tmp_path / "project")
    specs = tmp_path / "specs"
    specs.mkdir()
    assert "my_project" not in sys.modules

    # Ship and train on 2 ranks, uninterrupted.
    config = {"epochs": 4, "lr": 0.01, "hidden_sizes": [64]}
    first = ok(cli("submit", str(_spec(specs / "job.yaml", entrypoint="my_project.flaky:train", config=config,
                                        num_workers=2)), "--watch"))
    baseline = ok_json(cli("jobs", "get", created(first), "-o", "json"))
    assert baseline["spec"]["runtime_env"]["working_dir"].startswith("paddleray://packages/sha256-")

    # The same project again, on the warm workers the first run left: it fails after epoch 2, once.
    flaky = ok(cli("submit", str(_spec(specs / "flaky.yaml", entrypoint="my_project.flaky:train", num_workers=2,
                                        config={**config, "fail_after_epoch": 2}, retries=1)), "--watch"))
    retried = ok_json(cli("jobs", "get", created(flaky), "-o", "json"))
    assert [a["state"] for a in retried["attempts"]] == ["JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED"], retried
    assert "injected failure after epoch 2" in retried["attempts"][0]["failure"]["message"]
    assert _pids(cli, retried["name"], 1) == _pids(cli, baseline["name"], 1), "the failing attempt ran warm"
    assert retried["latest_metrics"]["metrics"]["epoch"] == 4
    assert retried["latest_metrics"]["metrics"]["loss"] == baseline["latest_metrics"]["metrics"]["loss"]

    # A sweep with ASHA over the documented function itself, then a fine-tune from its best trial.
    sweep = ok(cli("sweep", str(_sweep_spec(specs / "sweep.yaml")), "--watch"))
    experiment = ok_json(cli("experiments", "get", created(sweep), "-o", "json"))
    assert experiment["state"] == "EXPERIMENT_STATE_SUCCEEDED" and len(experiment["trials"]) == 2
    best = experiment["best_trial"]["job"]
    tuned_run = ok(cli("submit", str(_spec(specs / "tune.yaml", entrypoint="my_project.train_digits:train",
                                            config={"epochs": 1, "hidden_sizes": [64]}, init_from=best)), "--watch"))
    tuned = ok_json(cli("jobs", "get", created(tuned_run), "-o", "json"))
    assert tuned["spec"]["init_from"]["resolved_uri"]

    # Export through the CLI: from the job (its entrypoint module's build_model, in the job's
    # package), and from its checkpoint with the project directory as the builder's code.
    exported = ok(cli("models", "export", "--job", tuned["name"], "--model", MODEL, "--format", "onnx",
                       "--input", "x:FP32:-1,64", "--wait"))
    assert f"models/{MODEL}/versions/1 READY" in exported.stdout, exported.stdout
    assert "validation: static vs dynamic model" in exported.stdout and ": passed" in exported.stdout
    assert "PADDLE_INFERENCE" in exported.stdout and "ONNX_RUNTIME" in exported.stdout, exported.stdout
    checkpoint = tuned["latest_checkpoint"]["uri"]
    second = ok_json(cli("models", "export", "--checkpoint", checkpoint, "--builder", "my_project.train_digits:build_model",
                       "--working-dir", str(project), "--input", "x:FP32:-1,64", "--model", MODEL, "--wait",
                       "-o", "json"))
    assert second["state"] == "MODEL_VERSION_STATE_READY" and second["validation"]["passed"], second

    # Serve it and ask it, through the CLI and the stock tritonclient, on rows it never trained on.
    ok(cli("deployments", "create", MODEL, "--model", MODEL, "--version", "1", "--cpus", "0.1", "--wait"))
    from sklearn.datasets import load_digits

    x, _ = load_digits(return_X_y=True)
    rows = (x[-8:] / 16.0).astype("float32")
    np.save(tmp_path / "rows.npy", rows)
    predicted = ok_json(cli("predict", MODEL, "--input", f"x=@{tmp_path / 'rows.npy'}", "-o", "json"))
    [logits] = predicted["outputs"]
    served = np.asarray(logits["data"], np.float32).reshape(logits["shape"])
    endpoint = ok_json(cli("deployments", "get", MODEL, "-o", "json"))["endpoint"]
    case = tmp_path / "case.json"
    case.write_text(json.dumps({"x": rows.tolist()}))
    triton = subprocess.run([triton_python(), str(Path(__file__).with_name("triton_infer.py")), endpoint, MODEL, "x",
                             logits["name"], str(case)], capture_output=True, text=True, timeout=300)
    assert triton.returncode == 0, triton.stderr[-3000:]
    answer = json.loads(triton.stdout.strip().splitlines()[-1])
    assert answer["model_ready"]
    source = ok_json(cli("models", "get", f"{MODEL}/versions/1", "-o", "json"))["source_checkpoint"]["uri"]
    expected = _dynamic_model(project, source, rows)
    np.testing.assert_allclose(served, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(answer["output"], np.float32), expected, rtol=1e-4, atol=1e-5)

    # Delete.
    ok(cli("deployments", "delete", MODEL, "--wait"))
    assert f"deleted models/{MODEL}" in ok(cli("models", "delete", MODEL)).stdout
    assert cli("models", "get", MODEL).exit_code == ExitCode.REJECTED
