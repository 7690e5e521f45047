"""Shipped code with the services as real processes (the local stack): a project uploaded to
the scheduler process trains in the trainer process, which finds the package on the storage
root the stack gives both, and the built-in example fine-tunes from another job's checkpoint."""

from __future__ import annotations

import shutil
from pathlib import Path

import grpc
import pytest

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2, job_service_pb2, job_service_pb2_grpc
from paddleray.services.cli.jobs_commands import build_job
from paddleray.services.client.packaging import upload_package
from paddleray.services.localstack import stack

pytestmark = pytest.mark.e2e

PROJECT = Path(__file__).parents[1] / "integration" / "scheduler" / "user_project"
MLP = "paddleray.services.trainer.examples.digits_mlp:train"


@pytest.fixture
def running_stack(tmp_path, redis_url, ray_head):
    state = stack.up(tmp_path / "stack", redis_url=redis_url, ray_address=ray_head.address)
    yield state
    stack.down(tmp_path / "stack")


def _run(jobs, job: job_pb2.Job) -> job_pb2.Job:
    created = jobs.CreateJob(job_service_pb2.CreateJobRequest(job=job)).job
    for _ in jobs.WatchJob(job_service_pb2.WatchJobRequest(name=created.name), timeout=300):
        pass
    return jobs.GetJob(job_service_pb2.GetJobRequest(name=created.name)).job


def test_an_uploaded_project_runs_and_the_example_fine_tunes(running_stack, tmp_path):
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("__pycache__"))
    with grpc.insecure_channel(running_stack.address("scheduler")) as channel:
        jobs = job_service_pb2_grpc.JobServiceStub(channel)
        uri = upload_package(channel, project)
        assert (Path(running_stack.storage_root) / "packages" / f"{uri.rpartition('/')[2]}.zip").is_file()
        job = job_pb2.Job(spec=common_pb2.TrainingSpec(
            entrypoint="my_trainer.train:train", resources_per_worker=common_pb2.Resources(num_cpus=1),
            runtime_env=common_pb2.RuntimeEnv(working_dir=uri),
        ))
        job.spec.config.update({"epochs": 1})
        done = _run(jobs, job)
        assert done.state == job_pb2.JOB_STATE_SUCCEEDED, done.state_reason
        assert done.latest_metrics.metrics["epoch"] == 1.0

        baseline = _run(jobs, build_job(MLP, {"epochs": 2, "hidden_sizes": [16]}, workers=1, cpus=1))
        assert baseline.state == job_pb2.JOB_STATE_SUCCEEDED, baseline.state_reason
        tune = build_job(MLP, {"epochs": 1, "hidden_sizes": [16]}, workers=1, cpus=1)
        tune.spec.init_from.job = baseline.name
        tuned = _run(jobs, tune)
        assert tuned.state == job_pb2.JOB_STATE_SUCCEEDED, tuned.state_reason
        assert tuned.spec.init_from.resolved_uri == baseline.latest_checkpoint.uri
        logs = [line.text for r in jobs.GetJobLogs(job_service_pb2.GetJobLogsRequest(name=tuned.name), timeout=60)
                for line in r.lines]
        assert any(f"starts from the weights in {baseline.latest_checkpoint.uri}" in text for text in logs)
