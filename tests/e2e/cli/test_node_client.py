"""The Node.js client (clients/node) against the real stack (its npm packages are installed by the
`node_client` fixture in conftest.py); its v2 inference calls are in test_cli_serving.py, where a
model is deployed."""

from __future__ import annotations

import json
import subprocess

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def test_node_creates_watches_lists_and_reads_logs_of_a_job(node_client, cli_stack):
    result = subprocess.run(
        ["node", "client.mjs", "--scheduler", cli_stack.address("scheduler"),
         "--config", json.dumps({"epochs": 2, "hidden_sizes": [8]})],
        cwd=node_client, capture_output=True, text=True, timeout=240,
    )
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert result.returncode == 0, result.stdout + result.stderr
    steps = {r["step"]: r for r in records if r["step"] != "event"}
    events = [r for r in records if r["step"] == "event"]
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
    assert [e["detail"]["metrics"]["epoch"] for e in events if e["kind"] == "metrics"] == [1, 2]
    assert steps["finished"]["state"] == "JOB_STATE_SUCCEEDED" and steps["finished"]["name"] == steps["created"]["name"]
    assert steps["listed"]["found"] is True
    assert any("digits_mlp: rank 0/1" in line for line in steps["logs"]["lines"])


def test_node_reports_a_grpc_error_as_data(node_client, cli_stack):
    result = subprocess.run(
        ["node", "client.mjs", "--scheduler", cli_stack.address("scheduler"), "--entrypoint", "os:system"],
        cwd=node_client, capture_output=True, text=True, timeout=120,
    )
    last = json.loads(result.stdout.splitlines()[-1])
    assert result.returncode == 1
    assert last["step"] in ("error", "finished")
    if last["step"] == "finished":
        assert last["state"] == "JOB_STATE_FAILED"
