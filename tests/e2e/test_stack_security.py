"""The local stack with auth (and TLS) on: tokens reach every service consistently (a job runs
to SUCCEEDED and is exported over TLS from a password-protected Redis), secrets stay out of its
files, and a Redis it is given must answer."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import grpc
import pytest

from paddleray.exporter.v1 import exporter_service_pb2_grpc, model_pb2
from paddleray.scheduler.v1 import job_pb2, job_service_pb2, job_service_pb2_grpc
from paddleray.services.cli.jobs_commands import build_job
from paddleray.services.common.channels import open_blocking_channel
from paddleray.services.localstack import stack
from paddleray.services.localstack.health import serving
from paddleray.services.localstack.ports import free_port
from paddleray.trainer.v1 import trainer_service_pb2, trainer_service_pb2_grpc
from support.auth import ADMIN, MEMBER_A, MEMBER_B, write_token_file
from support.exporter import ExporterClient
from support.secure_redis import SecureRedis
from support.tls import make_test_ca

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

MLP = "paddleray.services.trainer.examples.digits_mlp:train"
TOKEN = "stack-wide-admin-token-000001"
REDIS_PASSWORD = "stack-redis-password-not-to-leak-5e1d"


def _run_job(address: str, token: str, tls_ca: Path | None = None) -> job_pb2.Job:
    with open_blocking_channel(address, tls_ca=tls_ca, token=token) as channel:
        jobs = job_service_pb2_grpc.JobServiceStub(channel)
        created = jobs.CreateJob(job_service_pb2.CreateJobRequest(
            job=build_job(MLP, {"epochs": 1, "hidden_sizes": [8]}, workers=1, cpus=1))).job
        for _ in jobs.WatchJob(job_service_pb2.WatchJobRequest(name=created.name), timeout=300):
            pass
        return jobs.GetJob(job_service_pb2.GetJobRequest(name=created.name)).job


def _files_text(directory: Path) -> dict[str, str]:
    return {str(p): p.read_text(errors="replace") for p in directory.rglob("*")
            if p.is_file() and p.stat().st_size < 50 << 20 and p.suffix in {".json", ".log", ".yml", ".yaml", ""}}


def _ray_token() -> str:
    path = Path.home() / ".ray" / "auth_token"
    return path.read_text().strip() if path.exists() else ""


def test_on_tls_with_a_password_protected_tls_redis_a_job_runs_and_exports_and_no_secret_is_in_the_stack_files(
        tmp_path, ray_head):
    ca = make_test_ca(tmp_path / "ca")
    # A Redis of the test's own: TLS only to its clients (the stack is given the rediss:// port)
    # and a password that goes nowhere but the services' REDIS_PASSWORD settings.
    redis = SecureRedis(tmp_path / "redis", REDIS_PASSWORD, ca=ca).start()
    state_dir = tmp_path / "stack"
    try:
        state = stack.up(state_dir, redis_url=redis.tls_url, redis_password=REDIS_PASSWORD, redis_tls_ca_file=ca.ca,
                         ray_address=ray_head.address, auth_token=TOKEN,
                         tls=stack.StackTls(ca.ca, ca.server.cert, ca.server.key))
        try:
            assert all(serving(p.address, tls_ca=ca.ca) and not serving(p.address) for p in state.services.values())
            with open_blocking_channel(state.address("scheduler"), tls_ca=ca.ca) as channel:
                with pytest.raises(grpc.RpcError) as refused:
                    job_service_pb2_grpc.JobServiceStub(channel).ListJobs(job_service_pb2.ListJobsRequest(), timeout=10)
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            # The scheduler reaches the trainer over TLS, with its token.
            done = _run_job(state.address("scheduler"), TOKEN, tls_ca=ca.ca)
            assert done.state == job_pb2.JOB_STATE_SUCCEEDED, done.state_reason
            # The exporter reads the job from the scheduler over TLS, with its own token, and
            # records the version in the password-protected Redis.
            with open_blocking_channel(state.address("exporter"), tls_ca=ca.ca, token=TOKEN) as channel:
                exporter = ExporterClient(exporter_service_pb2_grpc.ExporterServiceStub(channel))
                version = exporter.wait_done(exporter.export(parent="models/tls-digits", job=done.name).name, 300)
            assert version.state == model_pb2.MODEL_VERSION_STATE_READY, (version.state_reason, version.failure)
            assert version.source_job == done.name and version.validation.passed
            assert stat.S_IMODE(os.stat(stack.state_file(state_dir)).st_mode) == 0o600
            assert stat.S_IMODE(os.stat(state_dir).st_mode) == 0o700
        finally:
            stack.down(state_dir)
    finally:
        redis.stop()
    secrets = [s for s in (TOKEN, REDIS_PASSWORD, _ray_token()) if s]
    leaks = [f"{secret[:6]}... in {path}" for path, text in _files_text(state_dir).items() for secret in secrets
             if secret in text]
    assert leaks == []


def test_with_a_token_file_the_scheduler_gets_a_service_credential(tmp_path, redis_url, ray_head, monkeypatch):
    tokens = write_token_file(tmp_path / "tokens.yaml")
    for service in ("SCHEDULER", "TRAINER", "EXPORTER"):
        monkeypatch.setenv(f"PADDLERAY_{service}_AUTH_TOKENS_FILE", str(tokens))
    # Set in the environment for one service: `up` passes it on instead of blanking it.
    state_dir = tmp_path / "stack"
    state = stack.up(state_dir, redis_url=redis_url, ray_address=ray_head.address)
    try:
        done = _run_job(state.address("scheduler"), MEMBER_A)
        assert done.state == job_pb2.JOB_STATE_SUCCEEDED and done.tenant == "team-a", done.state_reason
        run = done.attempts[-1].run
        with open_blocking_channel(state.address("trainer"), token=MEMBER_A) as channel:
            assert trainer_service_pb2_grpc.TrainerServiceStub(channel).GetRun(
                trainer_service_pb2.GetRunRequest(name=run), timeout=10).run.tenant == "team-a"
        with open_blocking_channel(state.address("trainer"), token=MEMBER_B) as channel:
            with pytest.raises(grpc.RpcError) as hidden:
                trainer_service_pb2_grpc.TrainerServiceStub(channel).GetRun(
                    trainer_service_pb2.GetRunRequest(name=run), timeout=10)
            assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
        with open_blocking_channel(state.address("scheduler"), token=ADMIN) as channel:
            code = None
            try:
                job_service_pb2_grpc.JobServiceStub(channel).CreateJob(job_service_pb2.CreateJobRequest(
                    job=build_job("os:system", {}, workers=1, cpus=1)), timeout=10)
            except grpc.RpcError as exc:
                code = exc.code()
            assert code == grpc.StatusCode.PERMISSION_DENIED  # the trainer's allowlist, checked at CreateJob
    finally:
        stack.down(state_dir)


def test_up_refuses_a_named_redis_that_does_not_answer_without_showing_its_password(tmp_path):
    named = f"redis://:pw-not-to-show@127.0.0.1:{free_port()}/0"
    with pytest.raises(RuntimeError, match="does not answer") as refused:
        stack.up(tmp_path / "stack", redis_url=named, ray_address="127.0.0.1:1")
    assert "pw-not-to-show" not in str(refused.value) and ":***@" in str(refused.value)
