"""The services as real processes on the shared Ray: a job from CreateJob to its logs, and the demo."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import grpc
import pytest

from paddleray.scheduler.v1 import job_pb2, job_service_pb2, job_service_pb2_grpc
from paddleray.services.cli.jobs_commands import build_job
from paddleray.services.localstack import stack

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


def test_the_readme_demo_runs_end_to_end(tmp_path, redis_url):
    result = subprocess.run(
        [sys.executable, "-m", "paddleray.services.cli.main", "demo", "--state-dir", str(tmp_path / "demo")],
        capture_output=True, text=True, timeout=600, env={**os.environ, "REDIS_URL": redis_url, "COLUMNS": "160"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "ended SUCCEEDED" in result.stdout
    assert "best trial: jobs/" in result.stdout
    assert "EARLY_STOPPED" in result.stdout
    assert "stack stopped" in result.stdout
