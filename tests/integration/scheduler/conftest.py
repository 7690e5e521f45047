"""An in-process scheduler (real gRPC server, real Redis) in front of the scripted fake trainer."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import pytest
from grpc import aio

from paddleray.scheduler.v1 import job_pb2, job_service_pb2_grpc
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.services.common.server import start_server, stop_server
from paddleray.services.scheduler.__main__ import registrations
from paddleray.services.scheduler.app import SchedulerApp
from paddleray.services.scheduler.settings import SchedulerSettings
from support.fake_trainer import FakeTrainer, start_fake_trainer

# The entrypoints the scheduler tests submit (make_job's default, the real-trainer workers).
TEST_ALLOWLIST = ["pkg", "scheduler_test_entrypoints"]


@dataclass
class Stack:
    fake: FakeTrainer
    app: SchedulerApp
    stub: job_service_pb2_grpc.JobServiceStub
    address: str = ""

    async def create(self, job: job_pb2.Job, **kw) -> job_pb2.Job:
        return (await self.stub.CreateJob(js.CreateJobRequest(job=job, **kw))).job

    async def get(self, name: str) -> job_pb2.Job:
        return (await self.stub.GetJob(js.GetJobRequest(name=name))).job

    async def wait_terminal(self, name: str, timeout: float = 60) -> job_pb2.Job:
        return await self.app.manager.wait_terminal(name, timeout)

    async def events(self, name: str, after: int = 0, timeout: float = 60) -> list[job_pb2.JobEvent]:
        """The job's events until its terminal one (the stream ends there)."""
        request = js.WatchJobRequest(name=name, after_sequence=after)
        return [r.event async for r in self.stub.WatchJob(request, timeout=timeout)]


@pytest.fixture
def stack_factory(redis_url):
    """`async with stack_factory(cpus=.., gpus=.., **settings) as stack`."""

    @contextlib.asynccontextmanager
    async def make(cpus: float = 4, gpus: float = 0, fake: FakeTrainer | None = None, trainer_address: str = "",
                   **settings):
        """With trainer_address, the scheduler uses that (real) trainer instead of a fake."""
        fake = fake or FakeTrainer(cpus=cpus, gpus=gpus)
        trainer_server = None
        if not trainer_address:
            trainer_server, trainer_address = await start_fake_trainer(fake)
        defaults = {"dispatch_interval_s": 0.05, "lease_ttl_s": 3, "stop_wait_s": 10,
                    "entrypoint_allowlist": TEST_ALLOWLIST}
        config = SchedulerSettings(redis_url=redis_url, trainer_address=trainer_address, **(defaults | settings))
        app = SchedulerApp(config)
        server = await start_server(config, registrations(app))
        await app.start()
        channel = aio.insecure_channel(f"127.0.0.1:{server.port}")
        try:
            yield Stack(fake, app, job_service_pb2_grpc.JobServiceStub(channel), f"127.0.0.1:{server.port}")
        finally:
            await channel.close()
            await stop_server(server, 0.5)
            await app.stop()
            if trainer_server is not None:
                await trainer_server.stop(0.5)

    return make
