"""The services as real processes on the shared Ray: a job from CreateJob to its logs, and the demo."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import grpc
import pytest

from paddleray.scheduler.v1 import job_pb2, job_service_pb2, job_service_pb2_grpc
from paddleray.services.cli.demo import demo_stack
from paddleray.services.cli.jobs_commands import build_job
from paddleray.services.cli.progress import format_number
from paddleray.services.localstack import stack
from paddleray.services.localstack.health import serving
from paddleray.services.localstack.ports import pid_alive

pytestmark = pytest.mark.e2e

MLP = "paddleray.services.trainer.examples.digits_mlp:train"


@pytest.fixture
def running_stack(tmp_path, redis_url, ray_head):
    state = stack.up(tmp_path / "stack", redis_url=redis_url, ray_address=ray_head.address)
    yield state
    stack.down(tmp_path / "stack")


def test_a_data_parallel_job_runs_from_create_to_logs(running_stack):
    jobs = job_service_pb2_grpc.JobServiceStub(grpc.insecure_channel(running_stack.address("scheduler")))
    job = build_job(MLP, {"epochs": 2, "hidden_sizes": [16]}, workers=2, cpus=1)
    request_id = uuid.uuid4().hex
    created = jobs.CreateJob(job_service_pb2.CreateJobRequest(job=job, request_id=request_id)).job
    again = jobs.CreateJob(job_service_pb2.CreateJobRequest(job=job, request_id=request_id)).job
    assert again.name == created.name

    events = [r.event for r in jobs.WatchJob(job_service_pb2.WatchJobRequest(name=created.name), timeout=300)]
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    states = [e.state_change.to_state for e in events if e.WhichOneof("payload") == "state_change"]
    assert states == [job_pb2.JOB_STATE_QUEUED, job_pb2.JOB_STATE_STARTING, job_pb2.JOB_STATE_RUNNING, job_pb2.JOB_STATE_SUCCEEDED], events
    epochs = [e.metrics.metrics["epoch"] for e in events if e.WhichOneof("payload") == "metrics"]
    assert epochs == [1.0, 2.0]
    checkpoints = [e.checkpoint for e in events if e.WhichOneof("payload") == "checkpoint"]
    assert [c.epoch for c in checkpoints] == [1, 2]
    assert all(os.path.isdir(c.uri) for c in checkpoints)

    finished = jobs.GetJob(job_service_pb2.GetJobRequest(name=created.name)).job
    assert finished.state == job_pb2.JOB_STATE_SUCCEEDED and len(finished.attempts) == 1
    assert finished.latest_checkpoint.epoch == 2

    lines = [line for r in jobs.GetJobLogs(job_service_pb2.GetJobLogsRequest(name=created.name), timeout=60) for line in r.lines]
    assert {line.rank for line in lines} == {0, 1}
    assert any("digits_mlp: rank 1/2" in line.text for line in lines)


def test_the_readme_demo_tells_the_whole_story_and_leaves_a_running_stack_alone(running_stack, tmp_path):
    out_dir = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "paddleray.services.cli.main", "demo", "--state-dir", running_stack.state_dir,
         "--out-dir", str(out_dir)],
        capture_output=True, text=True, timeout=900, env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "using the stack already running" in result.stdout and "stack stopped" not in result.stdout
    assert all(serving(p.address) for p in running_stack.services.values())
    summary_files = list(out_dir.glob("demo-*-summary.json"))
    assert len(summary_files) == 1 and f"summary: {summary_files[0].resolve()}" in result.stdout
    summary = json.loads(summary_files[0].read_text())
    assert "failed" not in summary

    # The sweep: 4 trials, 2 at a time, integers staying integers, one curve point per epoch.
    trials = summary["trials"]
    assert len(trials) >= 4 and summary["experiment"]["total_trials"] == len(trials)
    for trial in trials:
        assert all(type(size) is int for size in trial["parameters"]["hidden_sizes"]), trial["parameters"]
        assert [point["epoch"] for point in trial["curve"]] == list(range(1, trial["epochs"] + 1))
        assert f"hidden_sizes={json.dumps(trial['parameters']['hidden_sizes'])}" in result.stdout
    assert "hidden_sizes=[64.0]" not in result.stdout and "hidden_sizes=[32.0]" not in result.stdout
    # The table's best-checkpoint column and the best-trial line show the same figure.
    best = summary["best_trial"]
    best_trial = next(t for t in trials if t["job"] == best["job"])
    assert best["checkpoint"]["uri"] == best_trial["best_checkpoint"]["uri"]
    assert best["best_checkpoint_accuracy"] == max(t["best_checkpoint"]["metrics"]["accuracy"] for t in trials)
    figure = format_number(best["best_checkpoint_accuracy"])
    assert f"best trial: {best['job']} best-checkpoint accuracy={figure}" in result.stdout
    assert re.search(rf"{re.escape(best['job'])} \*\s.*\s{re.escape(figure)}\s", result.stdout), result.stdout

    # The retrain: data parallel, from the best trial's best checkpoint, to the end.
    retrain = summary["retrain"]
    assert retrain["state"] == "SUCCEEDED" and retrain["num_workers"] == 2
    assert retrain["init_from"] == {"job": best["job"], "resolved_uri": best["checkpoint"]["uri"],
                                    "is_best_trial_checkpoint": True}
    assert retrain["config"]["hidden_sizes"] == best["parameters"]["hidden_sizes"]
    assert len(retrain["curve"]) == retrain["config"]["epochs"]

    # Exported from the retrain job's best checkpoint, with validation figures within tolerance.
    version = summary["model_version"]
    assert version["state"] == "MODEL_VERSION_STATE_READY" and version["source_job"] == retrain["job"]
    assert version["source_checkpoint"]["uri"] == retrain["best_checkpoint"]["uri"]
    validation = version["validation"]
    assert validation["passed"] and validation["backends"]
    for backend in validation["backends"]:
        assert backend["passed"] and backend["max_abs_error"] <= validation["atol"] + validation["rtol"], backend
    # Deployed, and the held-out digits through v2 ModelInfer give the figure the trainer
    # measured on the same rows with the exported checkpoint.
    assert summary["deployment"]["state"] == "DEPLOYMENT_STATE_HEALTHY"
    inference = summary["inference"]
    # Queried at the endpoint the deployment shows (Serve's HAProxy, straight to its replicas).
    deployment = summary["deployment"]
    assert inference["rows"] == 359 and inference["endpoint"] == deployment["endpoint"]
    assert deployment["http_endpoint"].endswith(f"/v2/models/{deployment['serving_name']}")
    assert abs(inference["accuracy"] - inference["expected_accuracy"]) <= 2 / inference["rows"], inference
    assert inference["batch_call"]["agrees_with_single_rows"]
    latency = inference["latency_ms"]
    assert all(math.isfinite(latency[k]) and latency[k] > 0 for k in ("p50", "p99", "mean"))
    assert latency["p50"] <= latency["p99"]
    assert f"accuracy {inference['accuracy']:.4f}" in result.stdout and "deleted" in result.stdout

    timings = summary["timings_s"]
    assert {"stack", "sweep", "retrain", "report", "export", "deploy", "query", "total"} <= set(timings)
    assert timings["total"] >= sum(v for k, v in timings.items() if k != "total") - 1
    png = Path(summary["files"]["png"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_the_demo_starts_a_stack_of_its_own_when_none_runs_and_stops_it(tmp_path):
    state_dir = tmp_path / "own"
    with demo_stack(state_dir, keep=False) as state:
        assert all(serving(p.address) for p in state.services.values())
        started = {name: p.pid for name, p in state.services.items()} | {"ray head": state.ray_pid,
                                                                         "redis": state.redis_pid}
    assert state.ray_pid is not None and state.redis_pid is not None
    alive = {name: pid for name, pid in started.items() if pid is not None and pid_alive(pid)}
    assert not alive, f"still running after the demo stopped its stack: {alive}"
    assert stack.StackState.load(state_dir) is None
