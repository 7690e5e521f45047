"""`paddleray models | deployments | predict` against the real stack (exporter, Ray Serve on the
session's Ray head), in one sequence because serving takes minutes on 2 cores: a trained job
exported twice (from the job, and from its checkpoint with a builder), deployed, queried through
the v2 endpoint, split 50/50, refused deletion while served, undeployed and deleted."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
import yaml

from paddleray.services.cli.output import ExitCode
from paddleray.services.client import Client, ServiceError
from paddleray.services.trainer.examples import digits_data
from support.cli import ok, ok_json

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]
MLP = "paddleray.services.trainer.examples.digits_mlp"
CONFIG = {"epochs": 1, "hidden_sizes": [8]}
MODEL = "cli-digits"


@pytest.fixture
def cleanup(cli_stack):
    """Never a deployment left behind: Serve replicas hold the stack's CPUs."""
    yield
    with Client.connect(address=cli_stack.address("scheduler"), state_dir=cli_stack.state_dir) as client:
        try:
            client.exporter.delete_deployment(MODEL)
            client.exporter.wait_deleted(MODEL, timeout=180)
        except ServiceError:
            pass


def test_export_deploy_predict_split_and_delete(serving_cli, cleanup, node_client, tmp_path):
    cli = serving_cli
    trained = ok(cli("jobs", "submit", f"{MLP}:train", "--config", json.dumps(CONFIG), "--watch"))
    job = next(line.split()[1] for line in trained.stdout.splitlines() if line.startswith("created "))

    exported = ok(cli("models", "export", "--job", job, "--model", MODEL, "--wait"))
    assert f"models/{MODEL}/versions/1 READY" in exported.stdout
    assert "validation: static vs dynamic model" in exported.stdout and "PADDLE_INFERENCE" in exported.stdout, exported.stdout
    assert job in exported.stdout
    checkpoint = ok_json(cli("jobs", "get", job, "-o", "json"))["latest_checkpoint"]["uri"]
    second = ok_json(cli("models", "export", "--checkpoint", checkpoint, "--builder", f"{MLP}:build_model",
                       "--config", json.dumps(CONFIG), "--model", MODEL, "--wait", "-o", "json"))
    assert second["name"] == f"models/{MODEL}/versions/2" and second["state"] == "MODEL_VERSION_STATE_READY"
    assert second["validation"]["passed"] is True

    assert f"models/{MODEL}" in ok(cli("models", "list")).stdout
    versions = ok_json(cli("models", "versions", MODEL, "-o", "json"))
    assert [v["name"] for v in versions] == [f"models/{MODEL}/versions/2", f"models/{MODEL}/versions/1"]
    one = yaml.safe_load(ok(cli("models", "get", f"models/{MODEL}/versions/1", "-o", "yaml")).stdout)
    assert one["source_job"] == job and one["inputs"][0]["name"] == "x"
    shown = ok(cli("models", "get", MODEL))
    assert "latest version  2" in shown.stdout and "versions/1" in shown.stdout

    missing = cli("deployments", "create", MODEL, "--model", MODEL, "--version", "9")
    assert missing.exit_code == ExitCode.REJECTED and "NOT_FOUND" in missing.stderr, missing.stderr

    deployed = ok(cli("deployments", "create", MODEL, "--model", MODEL, "--version", "1", "--cpus", "0.1", "--wait"))
    assert "HEALTHY" in deployed.stdout and f"serving model_name '{MODEL}'" in deployed.stdout
    listed = ok_json(cli("deployments", "list", "-o", "json"))
    assert [d["serving_name"] for d in listed if d["name"] == f"deployments/{MODEL}"] == [MODEL]

    features, labels = digits_data.load_split(0.2, 0)["validation"]
    rows = tmp_path / "rows.npy"
    np.save(rows, features[:16].astype(np.float64))  # float64: the CLI converts to the model's FP32
    first = ok_json(cli("predict", MODEL, "--input", f"x=@{rows}", "-o", "json"))
    assert first["model_version"] == "1"
    [logits] = first["outputs"]
    assert logits["shape"] == [16, 10] and logits["datatype"] == "FP32"
    as_json = tmp_path / "rows.json"
    as_json.write_text(json.dumps(features[:16].tolist()))
    unnamed = ok_json(cli("predict", MODEL, "--input", f"@{as_json}", "-o", "json"))
    np.testing.assert_allclose(unnamed["outputs"][0]["data"], logits["data"], rtol=1e-5)
    accuracy = np.mean(np.argmax(np.asarray(logits["data"]), axis=1) == labels[:16])
    assert accuracy > 0.2, accuracy  # 1 epoch of an 8-wide MLP: well above chance (0.1), not perfect
    table = ok(cli("predict", MODEL, "-i", f"x=@{rows}"))
    assert "model_name 'cli-digits' version 1" in table.stdout and "argmax per row" in table.stdout
    wrong = cli("predict", MODEL, "--input", f"y=@{rows}")
    assert wrong.exit_code == ExitCode.USAGE and "unknown input 'y'" in wrong.stderr, wrong.stderr
    _node_infers_what_the_cli_does(cli, node_client, tmp_path)

    ok(cli("deployments", "update", MODEL, "--traffic", "1=50,2=50", "--wait"))
    got = ok_json(cli("deployments", "get", MODEL, "-o", "json"))
    assert {t["model_version"]: t["percent"] for t in got["traffic"]} == {
        f"models/{MODEL}/versions/1": 50, f"models/{MODEL}/versions/2": 50}
    assert got["state"] == "DEPLOYMENT_STATE_HEALTHY"
    two = ok_json(cli("predict", MODEL, "--version", "2", "--input", f"x=@{rows}", "-o", "json"))
    assert two["model_version"] == "2"
    # The same weights (the job's only checkpoint), exported the two ways: the same logits.
    np.testing.assert_allclose(two["outputs"][0]["data"], logits["data"], rtol=1e-4, atol=1e-5)
    assert "1=50,2=50" in ok(cli("deployments", "get", MODEL)).stdout

    served = cli("models", "delete", MODEL)
    assert served.exit_code == ExitCode.REJECTED and "FAILED_PRECONDITION" in served.stderr, served.stderr
    gone = ok(cli("deployments", "delete", MODEL, "--wait"))
    assert f"deployments/{MODEL} deleted" in gone.stdout
    assert all(d["name"] != f"deployments/{MODEL}" for d in ok_json(cli("deployments", "list", "-o", "json")))
    nowhere = cli("predict", MODEL, "--input", f"x=@{rows}")
    assert nowhere.exit_code == ExitCode.REJECTED and "no deployment serves model_name" in nowhere.stderr
    assert f"deleted models/{MODEL}/versions/2" in ok(cli("models", "delete", f"{MODEL}/versions/2")).stdout
    assert [v["name"] for v in ok_json(cli("models", "versions", MODEL, "-o", "json"))] == [f"models/{MODEL}/versions/1"]
    assert f"deleted models/{MODEL}" in ok(cli("models", "delete", MODEL)).stdout
    assert cli("models", "get", MODEL).exit_code == ExitCode.REJECTED


def _node_infers_what_the_cli_does(cli, node_client, tmp_path) -> None:
    """The Node client's v2 calls (ServerLive, ServerReady, ModelInfer with typed FP32 contents)
    at the endpoint the deployment shows, against the CLI's answer for the same row (all 0.5)."""
    endpoint = ok_json(cli("deployments", "get", MODEL, "-o", "json"))["endpoint"]
    node = subprocess.run(["node", "client.mjs", "--inference", endpoint, "--model", MODEL, "--input-shape", "1,64"],
                          cwd=node_client, capture_output=True, text=True, timeout=120)
    assert node.returncode == 0, node.stdout + node.stderr
    steps = {r["step"]: r for r in map(json.loads, node.stdout.splitlines())}
    assert steps["inference"] == {"step": "inference", "live": True, "ready": True}
    assert steps["infer"]["model"] == MODEL and steps["infer"]["shape"] == [1, 10]
    row = tmp_path / "half.json"
    row.write_text(json.dumps([[0.5] * 64]))
    expected = ok_json(cli("predict", MODEL, "--input", f"x=@{row}", "-o", "json"))["outputs"][0]["data"]
    np.testing.assert_allclose(steps["infer"]["values"], np.ravel(expected), rtol=1e-5, atol=1e-6)
