"""TLS and mTLS end to end, with a certificate authority made in the test.

Servers are the project's own create_server; clients are the project's own: the shared channel
factory, the local stack's health check, and the scheduler's trainer client (a job dispatched
over TLS with the scheduler's service credential runs to SUCCEEDED).
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc import aio
from pydantic import ValidationError

from paddleray.scheduler.v1 import job_pb2, job_service_pb2_grpc
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.services.common.channels import open_blocking_channel, open_channel
from paddleray.services.common.server import ServiceRegistration, start_server, stop_server
from paddleray.services.common.settings import ServiceSettings
from paddleray.services.localstack.health import serving
from paddleray.services.scheduler.__main__ import registrations
from paddleray.services.scheduler.app import SchedulerApp
from paddleray.services.scheduler.settings import SchedulerSettings, TrainerPeer
from paddleray.services.scheduler.trainer_client import TrainerClient
from paddleray.trainer.v1 import trainer_service_pb2 as ts
from paddleray.trainer.v1 import trainer_service_pb2_grpc
from support.fake_trainer import FakeTrainer
from support.scheduler import make_job
from support.tls import make_test_ca

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
TOKEN = "trainer-service-token-000001"


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return make_test_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory):
    return make_test_ca(tmp_path_factory.mktemp("other-ca"), "someone-elses-ca")


def _registration(fake: FakeTrainer) -> ServiceRegistration:
    return ServiceRegistration("paddleray.trainer.v1.TrainerService", fake,
                               trainer_service_pb2_grpc.add_TrainerServiceServicer_to_server)


async def _tls_trainer(ca, mtls: bool = False, fake: FakeTrainer | None = None):
    settings = ServiceSettings(port=0, auth_token=TOKEN, tls_cert_file=ca.server.cert, tls_key_file=ca.server.key,
                               tls_client_ca_file=ca.ca if mtls else None)
    return await start_server(settings, [_registration(fake or FakeTrainer())])


def _blocking_code(channel) -> grpc.StatusCode:
    try:
        trainer_service_pb2_grpc.TrainerServiceStub(channel).GetClusterResources(
            ts.GetClusterResourcesRequest(), timeout=5)
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


async def test_tls_server_with_the_channel_factory_and_the_health_check(ca, other_ca):
    server = await _tls_trainer(ca)
    address = f"127.0.0.1:{server.port}"
    try:
        # The health checks are blocking: run them off this loop, which serves the trainer.
        assert not await asyncio.to_thread(serving, address)  # plaintext cannot talk to a TLS server
        assert await asyncio.to_thread(serving, address, tls_ca=ca.ca)
        assert not await asyncio.to_thread(serving, address, tls_ca=other_ca.ca)  # a server we do not trust
        assert await asyncio.to_thread(serving, f"localhost:{server.port}", tls_ca=ca.ca.read_bytes())

        def blocking(token):
            with open_blocking_channel(address, tls_ca=ca.ca, token=token) as channel:
                return _blocking_code(channel)

        assert await asyncio.to_thread(blocking, TOKEN) == grpc.StatusCode.OK
        assert await asyncio.to_thread(blocking, None) == grpc.StatusCode.UNAUTHENTICATED

        async with open_channel(address, tls_ca=ca.ca, token=TOKEN) as channel:
            stub = trainer_service_pb2_grpc.TrainerServiceStub(channel)
            resources = await stub.GetClusterResources(ts.GetClusterResourcesRequest(), timeout=5)
            assert resources.total.num_cpus == 4
        client = TrainerClient(TrainerPeer(address=address, auth_token=TOKEN, rpc_timeout_s=5, tls_ca_file=ca.ca))
        try:
            assert (await client.cluster_resources()).total.num_cpus == 4
        finally:
            await client.close()
    finally:
        await stop_server(server, 0)


async def test_mtls_requires_a_client_certificate_the_ca_signed(ca, other_ca):
    server = await _tls_trainer(ca, mtls=True)
    address = f"127.0.0.1:{server.port}"
    try:
        assert not await asyncio.to_thread(serving, address, tls_ca=ca.ca)
        assert not await asyncio.to_thread(
            serving, address, tls_ca=ca.ca, client_cert=(other_ca.client.cert, other_ca.client.key))
        assert await asyncio.to_thread(serving, address, tls_ca=ca.ca, client_cert=(ca.client.cert, ca.client.key))
        client = TrainerClient(TrainerPeer(address=address, auth_token=TOKEN, rpc_timeout_s=5, tls_ca_file=ca.ca,
                                           tls_cert_file=ca.client.cert, tls_key_file=ca.client.key))
        try:
            assert (await client.cluster_resources()).total.num_cpus == 4
        finally:
            await client.close()
    finally:
        await stop_server(server, 0)


async def test_scheduler_dispatches_to_a_tls_trainer_with_its_service_credential(ca, redis_url):
    fake = FakeTrainer()
    trainer = await _tls_trainer(ca, mtls=True, fake=fake)
    settings = SchedulerSettings(
        redis_url=redis_url, trainer_address=f"127.0.0.1:{trainer.port}", trainer_auth_token=TOKEN,
        trainer_tls_ca_file=ca.ca, trainer_tls_cert_file=ca.client.cert, trainer_tls_key_file=ca.client.key,
        tls_cert_file=ca.server.cert, tls_key_file=ca.server.key, dispatch_interval_s=0.05,
        entrypoint_allowlist=["pkg"],
    )
    app = SchedulerApp(settings)
    scheduler = await start_server(settings, registrations(app))
    await app.start()
    try:
        async with open_channel(f"127.0.0.1:{scheduler.port}", tls_ca=ca.ca) as channel:
            stub = job_service_pb2_grpc.JobServiceStub(channel)
            job = (await stub.CreateJob(js.CreateJobRequest(job=make_job()))).job
            done = await app.manager.wait_terminal(job.name, 30)
            assert done.state == job_pb2.JOB_STATE_SUCCEEDED, done.state_reason
            assert fake.runs_of(job.name)
    finally:
        await stop_server(scheduler, 0)
        await app.stop()
        await stop_server(trainer, 0)


async def test_plaintext_stays_the_default_and_half_a_tls_config_is_refused(ca):
    server = await start_server(ServiceSettings(port=0), [_registration(FakeTrainer())])
    try:
        async with aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = trainer_service_pb2_grpc.TrainerServiceStub(channel)
            assert (await stub.GetClusterResources(ts.GetClusterResourcesRequest(), timeout=5)).total.num_cpus == 4
    finally:
        await stop_server(server, 0)
    with pytest.raises(ValidationError, match="go together"):
        ServiceSettings(tls_cert_file=ca.server.cert)
    with pytest.raises(ValidationError, match="needs tls_cert_file"):
        ServiceSettings(tls_client_ca_file=ca.ca)
