"""Every JobService and ExperimentService RPC x every kind of caller, over real gRPC and Redis.

Callers: no token, a token no one holds, read-only of team-a, member of team-a, member of
team-b, admin. The resources acted on belong to team-a; another tenant's resource answers
NOT_FOUND as if absent, read-only callers cannot change anything, admins reach everything.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import zipfile

import grpc
import pytest
from grpc import aio

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import (
    experiment_pb2,
    experiment_service_pb2_grpc,
    job_pb2,
    job_service_pb2_grpc,
    package_service_pb2_grpc,
)
from paddleray.scheduler.v1 import experiment_service_pb2 as es
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.scheduler.v1 import package_service_pb2 as pb_packages
from paddleray.services.common.server import start_server, stop_server
from paddleray.services.localstack.ports import free_port
from paddleray.services.scheduler.__main__ import registrations
from paddleray.services.scheduler.app import SchedulerApp
from paddleray.services.scheduler.settings import SchedulerSettings
from support.auth import ADMIN, CALLERS, MEMBER_A, MEMBER_B, check_matrix, code_of, expect, metadata, write_token_file
from support.fake_trainer import FakeTrainer, start_fake_trainer
from support.scheduler import make_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
C = grpc.StatusCode
J = job_pb2.JobState


@contextlib.asynccontextmanager
async def scheduler(redis_url, tmp_path, trainer_address: str = "", **settings):
    config = SchedulerSettings(
        redis_url=redis_url, trainer_address=trainer_address or f"127.0.0.1:{free_port()}",
        auth_tokens_file=write_token_file(tmp_path / "tokens.yaml"), dispatch_interval_s=0.05,
        entrypoint_allowlist=["pkg"], **settings,
    )
    app = SchedulerApp(config)
    server = await start_server(config, registrations(app))
    await app.start()
    channel = aio.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        yield (job_service_pb2_grpc.JobServiceStub(channel), experiment_service_pb2_grpc.ExperimentServiceStub(channel),
               package_service_pb2_grpc.PackageServiceStub(channel))
    finally:
        await channel.close()
        await stop_server(server, 0.5)
        await app.stop()


def _sweep(tenant: str = "") -> experiment_pb2.Experiment:
    experiment = experiment_pb2.Experiment(
        trial_template=make_job(tenant=tenant), metric="acc", mode=common_pb2.METRIC_MODE_MAX, max_concurrent_trials=1,
    )
    experiment.search_space.parameters["lr"].grid.values.add().number_value = 0.1
    return experiment


async def test_job_service_matrix(redis_url, tmp_path):
    async with scheduler(redis_url, tmp_path, dispatch=False) as (jobs, _, _):
        async def team_a_job(terminal: bool = False) -> str:
            job = (await jobs.CreateJob(js.CreateJobRequest(job=make_job()), metadata=metadata(MEMBER_A))).job
            if terminal:
                await jobs.CancelJob(js.CancelJobRequest(name=job.name), metadata=metadata(ADMIN))
            return job.name

        async def create(md):
            return await jobs.CreateJob(js.CreateJobRequest(job=make_job()), metadata=md)

        async def create_for_team_a(md):
            return await jobs.CreateJob(js.CreateJobRequest(job=make_job(tenant="team-a")), metadata=md)

        async def get(md):
            return await jobs.GetJob(js.GetJobRequest(name=await team_a_job()), metadata=md)

        async def list_(md):
            await team_a_job()
            return await jobs.ListJobs(js.ListJobsRequest(), metadata=md)

        async def cancel(md):
            return await jobs.CancelJob(js.CancelJobRequest(name=await team_a_job()), metadata=md)

        async def delete(md):
            return await jobs.DeleteJob(js.DeleteJobRequest(name=await team_a_job(terminal=True)), metadata=md)

        async def watch(md):
            name = await team_a_job(terminal=True)
            return [r async for r in jobs.WatchJob(js.WatchJobRequest(name=name), metadata=md)]

        async def logs(md):
            name = await team_a_job()
            return [r async for r in jobs.GetJobLogs(js.GetJobLogsRequest(name=name), metadata=md)]

        hidden = C.NOT_FOUND  # another tenant's job: as if absent
        table = {
            "CreateJob": (create, expect(read_only_a=C.PERMISSION_DENIED, member_a=C.OK, member_b=C.OK, admin=C.OK)),
            "CreateJob(tenant=team-a)": (create_for_team_a, expect(
                read_only_a=C.PERMISSION_DENIED, member_a=C.OK, member_b=C.PERMISSION_DENIED, admin=C.OK)),
            "GetJob": (get, expect(read_only_a=C.OK, member_a=C.OK, member_b=hidden, admin=C.OK)),
            "ListJobs": (list_, expect(read_only_a=C.OK, member_a=C.OK, member_b=C.OK, admin=C.OK)),
            "CancelJob": (cancel, expect(read_only_a=C.PERMISSION_DENIED, member_a=C.OK, member_b=hidden, admin=C.OK)),
            "DeleteJob": (delete, expect(read_only_a=C.PERMISSION_DENIED, member_a=C.OK, member_b=hidden, admin=C.OK)),
            "WatchJob": (watch, expect(read_only_a=C.OK, member_a=C.OK, member_b=hidden, admin=C.OK)),
            # Visible but not started: FAILED_PRECONDITION, which says it exists.
            "GetJobLogs": (logs, expect(read_only_a=C.FAILED_PRECONDITION, member_a=C.FAILED_PRECONDITION,
                                        member_b=hidden, admin=C.FAILED_PRECONDITION)),
        }
        got = {rpc: {caller: await code_of(lambda c=call, t=token: c(metadata(t))) for caller, token in CALLERS.items()}
               for rpc, (call, _) in table.items()}
        assert check_matrix("scheduler", "JobService", {rpc: row for rpc, (_, row) in table.items()}, got) == []

        # What each caller sees: its tenant's jobs only; tenants come from the credential.
        async def listed(token, tenant=""):
            response = await jobs.ListJobs(js.ListJobsRequest(tenant=tenant, page_size=1000), metadata=metadata(token))
            return {j.tenant for j in response.jobs}

        assert await listed(MEMBER_A) == {"team-a"}
        assert await listed(MEMBER_B) == {"team-b"}
        assert await listed(MEMBER_B, tenant="team-a") == set()
        assert await listed(ADMIN) == {"team-a", "team-b", "ops"}
        assert await listed(ADMIN, tenant="team-b") == {"team-b"}


async def test_a_request_id_of_another_tenant_does_not_return_its_job(redis_url, tmp_path):
    async with scheduler(redis_url, tmp_path, dispatch=False) as (jobs, _, _):
        mine = (await jobs.CreateJob(js.CreateJobRequest(job=make_job(), request_id="r1"), metadata=metadata(MEMBER_A))).job
        again = (await jobs.CreateJob(js.CreateJobRequest(job=make_job(), request_id="r1"), metadata=metadata(MEMBER_A))).job
        assert again.name == mine.name
        code = await code_of(lambda: jobs.CreateJob(js.CreateJobRequest(job=make_job(), request_id="r1"),
                                                    metadata=metadata(MEMBER_B)))
        assert code == C.ALREADY_EXISTS


async def test_experiment_service_matrix(redis_url, tmp_path):
    async with scheduler(redis_url, tmp_path, dispatch=False) as (jobs, experiments, _):
        async def team_a_experiment(cancelled: bool = False) -> str:
            created = (await experiments.CreateExperiment(es.CreateExperimentRequest(experiment=_sweep()),
                                                          metadata=metadata(MEMBER_A))).experiment
            if cancelled:
                await experiments.CancelExperiment(es.CancelExperimentRequest(name=created.name), metadata=metadata(ADMIN))
            return created.name

        async def create(md):
            return await experiments.CreateExperiment(es.CreateExperimentRequest(experiment=_sweep()), metadata=md)

        async def create_for_team_a(md):
            return await experiments.CreateExperiment(es.CreateExperimentRequest(experiment=_sweep("team-a")), metadata=md)

        async def get(md):
            return await experiments.GetExperiment(es.GetExperimentRequest(name=await team_a_experiment()), metadata=md)

        async def list_(md):
            return await experiments.ListExperiments(es.ListExperimentsRequest(), metadata=md)

        async def cancel(md):
            name = await team_a_experiment()
            return await experiments.CancelExperiment(es.CancelExperimentRequest(name=name), metadata=md)

        hidden = C.NOT_FOUND
        table = {
            "CreateExperiment": (create, expect(read_only_a=C.PERMISSION_DENIED, member_a=C.OK, member_b=C.OK,
                                                admin=C.OK)),
            "CreateExperiment(tenant=team-a)": (create_for_team_a, expect(
                read_only_a=C.PERMISSION_DENIED, member_a=C.OK, member_b=C.PERMISSION_DENIED, admin=C.OK)),
            "GetExperiment": (get, expect(read_only_a=C.OK, member_a=C.OK, member_b=hidden, admin=C.OK)),
            "ListExperiments": (list_, expect(read_only_a=C.OK, member_a=C.OK, member_b=C.OK, admin=C.OK)),
            "CancelExperiment": (cancel, expect(read_only_a=C.PERMISSION_DENIED, member_a=C.OK, member_b=hidden,
                                                admin=C.OK)),
        }
        got = {rpc: {caller: await code_of(lambda c=call, t=token: c(metadata(t))) for caller, token in CALLERS.items()}
               for rpc, (call, _) in table.items()}
        assert check_matrix("scheduler", "ExperimentService", {rpc: row for rpc, (_, row) in table.items()}, got) == []

        # Trials are their experiment's tenant's jobs.
        trials = (await jobs.ListJobs(js.ListJobsRequest(page_size=1000), metadata=metadata(MEMBER_B))).jobs
        assert trials and {t.tenant for t in trials} == {"team-b"}
        seen_by_b = (await experiments.ListExperiments(es.ListExperimentsRequest(), metadata=metadata(MEMBER_B)))
        assert {e.trial_template.tenant for e in seen_by_b.experiments} == {"team-b"}
        seen_by_admin = (await experiments.ListExperiments(es.ListExperimentsRequest(), metadata=metadata(ADMIN)))
        assert {e.trial_template.tenant for e in seen_by_admin.experiments} == {"team-a", "team-b", "ops"}

        # DeleteExperiment: on a cancelled team-a experiment whose trial has ended.
        delete_row = expect(read_only_a=C.PERMISSION_DENIED, member_a=C.OK, member_b=hidden, admin=C.OK)
        deleted = {}
        for caller, token in CALLERS.items():
            name = await team_a_experiment(cancelled=True)
            for trial in (await jobs.ListJobs(js.ListJobsRequest(experiment=name), metadata=metadata(ADMIN))).jobs:
                await _wait_terminal(jobs, trial.name)
            deleted[caller] = await code_of(lambda n=name, t=token: experiments.DeleteExperiment(
                es.DeleteExperimentRequest(name=n), metadata=metadata(t)))
        assert check_matrix("scheduler", "ExperimentService (DeleteExperiment)", {"DeleteExperiment": delete_row},
                            {"DeleteExperiment": deleted}) == []


async def _wait_terminal(jobs, name: str) -> None:
    request = js.WatchJobRequest(name=name)
    async for _ in jobs.WatchJob(request, metadata=metadata(ADMIN), timeout=30):
        pass


async def test_quotas_attach_to_the_credentials_tenant(redis_url, tmp_path):
    """team-a may run one job at a time; its jobs name no tenant, the credential says team-a."""
    fake = FakeTrainer(cpus=8)
    trainer_server, address = await start_fake_trainer(fake)
    try:
        async with scheduler(redis_url, tmp_path, trainer_address=address,
                             tenant_limits={"team-a": {"max_jobs": 1}}) as (jobs, _, _):
            hanging = make_job(config={"hang": True})
            a1, a2 = [(await jobs.CreateJob(js.CreateJobRequest(job=hanging), metadata=metadata(MEMBER_A))).job
                      for _ in range(2)]
            b1 = (await jobs.CreateJob(js.CreateJobRequest(job=hanging), metadata=metadata(MEMBER_B))).job
            for name in (a1.name, b1.name):
                await _wait_state(jobs, name, J.JOB_STATE_RUNNING)
            a2_now = (await jobs.GetJob(js.GetJobRequest(name=a2.name), metadata=metadata(MEMBER_A))).job
            assert a2_now.state == J.JOB_STATE_QUEUED
            await jobs.CancelJob(js.CancelJobRequest(name=a1.name), metadata=metadata(MEMBER_A))
            await _wait_state(jobs, a2.name, J.JOB_STATE_RUNNING)
            for job in (a2, b1):
                await jobs.CancelJob(js.CancelJobRequest(name=job.name), metadata=metadata(ADMIN))
    finally:
        await trainer_server.stop(0.5)


async def _wait_state(jobs, name: str, state: int) -> None:
    async for response in jobs.WatchJob(js.WatchJobRequest(name=name), metadata=metadata(ADMIN), timeout=30):
        change = response.event.state_change
        if response.event.WhichOneof("payload") == "state_change" and change.to_state == state:
            return
    raise AssertionError(f"{name} ended without reaching {J.Name(state)}")


def _zip_upload() -> list[pb_packages.UploadPackageRequest]:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("my_trainer/train.py", "def train(config, ctx):\n    pass\n")
    data = buffer.getvalue()
    header = pb_packages.PackageHeader(sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data))
    return [pb_packages.UploadPackageRequest(header=header), pb_packages.UploadPackageRequest(chunk=data)]


async def test_package_service_matrix(redis_url, tmp_path):
    """Packages are content-addressed and shared: any caller may read one by name; uploading is a write."""
    async with scheduler(redis_url, tmp_path, dispatch=False, storage_root=tmp_path / "storage") as (_, _, packages):
        uploaded = (await packages.UploadPackage(iter(_zip_upload()), metadata=metadata(ADMIN))).package

        async def upload(md):
            return await packages.UploadPackage(iter(_zip_upload()), metadata=md)

        async def get(md):
            return await packages.GetPackage(pb_packages.GetPackageRequest(name=uploaded.name), metadata=md)

        table = {
            "UploadPackage": (upload, expect(read_only_a=C.PERMISSION_DENIED, member_a=C.OK, member_b=C.OK,
                                             admin=C.OK)),
            "GetPackage": (get, expect(read_only_a=C.OK, member_a=C.OK, member_b=C.OK, admin=C.OK)),
        }
        got = {rpc: {caller: await code_of(lambda c=call, t=token: c(metadata(t))) for caller, token in CALLERS.items()}
               for rpc, (call, _) in table.items()}
        assert check_matrix("scheduler", "PackageService", {rpc: row for rpc, (_, row) in table.items()}, got) == []
