"""The scheduler on a Redis with a password and TLS; Redis outages; no secret in any output.

Each test starts its own redis-server (requirepass, a TLS port with a certificate from a CA
made in the test, AOF fsync'd on every write) and the scheduler as a real process.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request

import grpc
import pytest
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import experiment_pb2, experiment_service_pb2_grpc, job_pb2, job_service_pb2_grpc
from paddleray.scheduler.v1 import experiment_service_pb2 as es
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.services.localstack.ports import free_port
from support.auth import ADMIN, CALLERS, MEMBER_A, MEMBER_B, metadata, write_token_file
from support.fake_trainer import FakeTrainer, start_fake_trainer
from support.scheduler import SchedulerProcess, make_job
from support.secure_redis import SecureRedis
from support.tls import make_test_ca

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
C = grpc.StatusCode
J = job_pb2.JobState
REDIS_PASSWORD = "redis-password-that-must-never-leak-7f3a"
TRAINER_TOKEN = "scheduler-service-token-at-trainer-01"


async def _health(address: str) -> int | None:
    async with aio.insecure_channel(address) as channel:
        try:
            response = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
        except aio.AioRpcError:
            return None
        return response.status


async def _wait_health(address: str, status: int, timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while await _health(address) != status:
            await asyncio.sleep(0.1)


def _sweep() -> experiment_pb2.Experiment:
    experiment = experiment_pb2.Experiment(trial_template=make_job(), metric="acc", mode=common_pb2.METRIC_MODE_MAX)
    experiment.search_space.parameters["lr"].grid.values.add().number_value = 0.1
    return experiment


def _every_rpc(jobs, experiments, job: str, experiment: str, md):
    """One call of every JobService and ExperimentService RPC, on existing resources."""
    def stream(call):
        async def drain():
            return [r async for r in call]
        return drain()

    return {
        "CreateJob": lambda: jobs.CreateJob(js.CreateJobRequest(job=make_job()), metadata=md, timeout=20),
        "GetJob": lambda: jobs.GetJob(js.GetJobRequest(name=job), metadata=md, timeout=20),
        "ListJobs": lambda: jobs.ListJobs(js.ListJobsRequest(), metadata=md, timeout=20),
        "CancelJob": lambda: jobs.CancelJob(js.CancelJobRequest(name=job), metadata=md, timeout=20),
        "DeleteJob": lambda: jobs.DeleteJob(js.DeleteJobRequest(name=job), metadata=md, timeout=20),
        "WatchJob": lambda: stream(jobs.WatchJob(js.WatchJobRequest(name=job), metadata=md, timeout=20)),
        "GetJobLogs": lambda: stream(jobs.GetJobLogs(js.GetJobLogsRequest(name=job), metadata=md, timeout=20)),
        "CreateExperiment": lambda: experiments.CreateExperiment(
            es.CreateExperimentRequest(experiment=_sweep()), metadata=md, timeout=20),
        "GetExperiment": lambda: experiments.GetExperiment(
            es.GetExperimentRequest(name=experiment), metadata=md, timeout=20),
        "ListExperiments": lambda: experiments.ListExperiments(es.ListExperimentsRequest(), metadata=md, timeout=20),
        "CancelExperiment": lambda: experiments.CancelExperiment(
            es.CancelExperimentRequest(name=experiment), metadata=md, timeout=20),
        "DeleteExperiment": lambda: experiments.DeleteExperiment(
            es.DeleteExperimentRequest(name=experiment), metadata=md, timeout=20),
    }


async def _status(call) -> tuple[C, str]:
    try:
        await call()
    except aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return C.OK, ""


@pytest.fixture
async def fake_trainer():
    fake = FakeTrainer(cpus=4)
    server, address = await start_fake_trainer(fake)
    yield fake, address
    await server.stop(0.5)


async def test_tls_and_password_work_and_no_secret_reaches_logs_metrics_state_or_errors(tmp_path, fake_trainer):
    ca = make_test_ca(tmp_path / "ca")
    redis_server = SecureRedis(tmp_path / "redis", REDIS_PASSWORD, ca).start()
    metrics_port = free_port()
    scheduler = SchedulerProcess(
        redis_server.tls_url, fake_trainer[1], tmp_path, redis_password=REDIS_PASSWORD, redis_tls_ca_file=ca.ca,
        auth_tokens_file=write_token_file(tmp_path / "tokens.yaml"), trainer_auth_token=TRAINER_TOKEN,
        metrics_port=metrics_port, log_level="DEBUG",
    )
    details: list[str] = []
    try:
        await scheduler.start(metadata(ADMIN))
        async with aio.insecure_channel(scheduler.address) as channel:
            jobs = job_service_pb2_grpc.JobServiceStub(channel)
            experiments = experiment_service_pb2_grpc.ExperimentServiceStub(channel)
            job = (await jobs.CreateJob(js.CreateJobRequest(job=make_job()), metadata=metadata(MEMBER_A))).job
            done = None
            async for response in jobs.WatchJob(js.WatchJobRequest(name=job.name), metadata=metadata(MEMBER_A),
                                                timeout=60):
                done = response.event.state_change.to_state or done
            assert done == J.JOB_STATE_SUCCEEDED  # dispatched and followed through TLS Redis
            experiment = (await experiments.CreateExperiment(es.CreateExperimentRequest(experiment=_sweep()),
                                                             metadata=metadata(MEMBER_A))).experiment
            # Every RPC as every caller: successes, refusals, and what they say.
            for token in CALLERS.values():
                for call in _every_rpc(jobs, experiments, job.name, experiment.name, metadata(token)).values():
                    details.append((await _status(call))[1])
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
        assert "paddleray_grpc_requests_total" in metrics
    finally:
        scheduler.stop()
    with redis_server.client() as client:
        stored = [repr(client.dump(key)) + repr(key) for key in client.scan_iter(count=1000)]
    redis_server.stop()
    log = scheduler.log_path().read_text()
    assert "DEBUG" in log
    secrets = [REDIS_PASSWORD, TRAINER_TOKEN, *[t for t in CALLERS.values() if t]]
    outputs = {"log": log, "metrics": metrics, "redis records": "\n".join(stored), "error details": "\n".join(details)}
    leaks = [f"{secret[:6]}... in {where}" for secret in secrets for where, text in outputs.items() if secret in text]
    assert leaks == []


async def test_a_wrong_redis_password_is_unavailable_and_not_serving(tmp_path, fake_trainer):
    redis_server = SecureRedis(tmp_path / "redis", REDIS_PASSWORD).start()
    scheduler = SchedulerProcess(redis_server.url, fake_trainer[1], tmp_path, redis_password="not-the-password-0000")
    try:
        # Listening, but never answering a call: NOT_SERVING, and UNAVAILABLE to every RPC. (Once
        # a 5 s "start() did not answer" here, which on a loaded machine also passed for a
        # scheduler still importing, leaving no port to check.)
        await scheduler.start_until_bound()
        await _wait_health(scheduler.address, health_pb2.HealthCheckResponse.NOT_SERVING)
        async with aio.insecure_channel(scheduler.address) as channel:
            calls = _every_rpc(job_service_pb2_grpc.JobServiceStub(channel),
                               experiment_service_pb2_grpc.ExperimentServiceStub(channel), "jobs/j1",
                               "experiments/e1", ())
            codes = {rpc: (await _status(call))[0] for rpc, call in calls.items()}
        assert codes == dict.fromkeys(calls, C.UNAVAILABLE)
    finally:
        scheduler.stop()
        redis_server.stop()
    log = scheduler.log_path().read_text()
    assert "Traceback" not in log and "unexpected error" not in log
    assert log.count("store outage") == 1
    assert "not-the-password-0000" not in log


async def test_redis_going_away_and_back_under_a_running_scheduler(tmp_path, fake_trainer, fault_figures):
    redis_server = SecureRedis(tmp_path / "redis", REDIS_PASSWORD).start()
    scheduler = SchedulerProcess(redis_server.url, fake_trainer[1], tmp_path, redis_password=REDIS_PASSWORD,
                                 store_check_interval_s=0.2, dispatch="false")
    try:
        await scheduler.start()
        async with aio.insecure_channel(scheduler.address) as channel:
            jobs = job_service_pb2_grpc.JobServiceStub(channel)
            experiments = experiment_service_pb2_grpc.ExperimentServiceStub(channel)
            accepted = [(await jobs.CreateJob(js.CreateJobRequest(job=make_job()))).job.name for _ in range(5)]
            experiment = (await experiments.CreateExperiment(es.CreateExperimentRequest(experiment=_sweep()))).experiment
            assert await _health(scheduler.address) == health_pb2.HealthCheckResponse.SERVING

            stopped = time.monotonic()
            redis_server.stop()
            await _wait_health(scheduler.address, health_pb2.HealthCheckResponse.NOT_SERVING)
            detected_s = time.monotonic() - stopped
            codes = {rpc: await _status(call)
                     for rpc, call in _every_rpc(jobs, experiments, accepted[0], experiment.name, ()).items()}
            assert {rpc: code for rpc, (code, _) in codes.items()} == dict.fromkeys(codes, C.UNAVAILABLE)
            assert all("unavailable" in text and "127.0.0.1" not in text for _, text in codes.values())

            restarted = time.monotonic()
            redis_server.start()
            await _wait_health(scheduler.address, health_pb2.HealthCheckResponse.SERVING)
            recovered_s = time.monotonic() - restarted
            listed = (await jobs.ListJobs(js.ListJobsRequest(page_size=1000))).jobs
            assert set(accepted) <= {j.name for j in listed}
            assert (await experiments.GetExperiment(es.GetExperimentRequest(name=experiment.name))).experiment.name
    finally:
        scheduler.stop()
        redis_server.stop()
    log = scheduler.log_path().read_text()
    assert log.count("store outage") == 1 and log.count("store reachable again") == 1
    assert "Traceback" not in log and "unexpected error" not in log
    fault_figures.record(
        faults_injected=1, jobs_submitted=len(accepted), experiments_submitted=1,
        jobs_lost=len(set(accepted) - {j.name for j in listed}), rpcs_called_during_outage=len(codes),
        rpcs_unavailable=sum(code == C.UNAVAILABLE for code, _ in codes.values()),
        stop_to_not_serving_s=round(detected_s, 2), restart_to_serving_s=round(recovered_s, 2),
    )


async def test_members_see_only_their_tenant_through_a_tls_redis(tmp_path, fake_trainer):
    """The tenant index lives in Redis like everything else: a smoke check that it holds over TLS."""
    ca = make_test_ca(tmp_path / "ca")
    redis_server = SecureRedis(tmp_path / "redis", REDIS_PASSWORD, ca).start()
    scheduler = SchedulerProcess(redis_server.tls_url, fake_trainer[1], tmp_path, redis_password=REDIS_PASSWORD,
                                 redis_tls_ca_file=ca.ca, auth_tokens_file=write_token_file(tmp_path / "t.yaml"),
                                 dispatch="false")
    try:
        await scheduler.start(metadata(ADMIN))
        async with aio.insecure_channel(scheduler.address) as channel:
            jobs = job_service_pb2_grpc.JobServiceStub(channel)
            a = (await jobs.CreateJob(js.CreateJobRequest(job=make_job()), metadata=metadata(MEMBER_A))).job
            code, _ = await _status(lambda: jobs.GetJob(js.GetJobRequest(name=a.name), metadata=metadata(MEMBER_B)))
            assert code == C.NOT_FOUND
    finally:
        scheduler.stop()
        redis_server.stop()
