"""Builders of scheduler protos shared by the scheduler's unit and integration tests."""

from __future__ import annotations

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2


def make_job(entrypoint: str = "pkg.train:main", *, cpus: float = 1.0, gpus: float = 0.0, workers: int = 1,
             priority: int = 0, tenant: str = "", labels: dict | None = None, max_retries: int = 0,
             timeout_s: float | None = None, config: dict | None = None, backoff_s: float = 0.05) -> job_pb2.Job:
    job = job_pb2.Job(
        spec=common_pb2.TrainingSpec(
            entrypoint=entrypoint, num_workers=workers,
            resources_per_worker=common_pb2.Resources(num_cpus=cpus, num_gpus=gpus),
        ),
        priority=priority, tenant=tenant, labels=labels or {},
        retry_policy=common_pb2.RetryPolicy(max_retries=max_retries),
    )
    job.retry_policy.initial_backoff.FromNanoseconds(int(backoff_s * 1e9))
    if config:
        job.spec.config.update(config)
    if timeout_s is not None:
        job.timeout.FromNanoseconds(int(timeout_s * 1e9))
    return job


class SchedulerProcess:
    """`python -m paddleray.services.scheduler` as a real child process, killable with SIGKILL.

    The first start binds port 0 and reads the bound port from the ready file (a port chosen
    here and bound by the child seconds later can be taken in between); a restart binds the
    same port again, as a restarted replica keeps its address, and only if that port was
    taken meanwhile comes up on a new one (`address` follows).
    """

    def __init__(self, redis_url: str, trainer_address: str, log_dir, **settings) -> None:
        import os

        self.port = 0
        self.log_dir = log_dir
        self.env = {
            **os.environ,
            "PADDLERAY_SCHEDULER_REDIS_URL": redis_url,
            "PADDLERAY_SCHEDULER_TRAINER_ADDRESS": trainer_address,
            "PADDLERAY_SCHEDULER_LEASE_TTL_S": "2",
            "PADDLERAY_SCHEDULER_DISPATCH_INTERVAL_S": "0.05",
            "PADDLERAY_SCHEDULER_GRACE_PERIOD_S": "0",
            "PADDLERAY_SCHEDULER_ENTRYPOINT_ALLOWLIST": '["pkg"]',  # make_job's default entrypoint
            **{f"PADDLERAY_SCHEDULER_{k.upper()}": str(v) for k, v in settings.items()},
        }
        self.proc = None
        self.starts = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log_path(self, start: int | None = None):
        """The log of one start (the latest by default)."""
        return self.log_dir / f"scheduler-{id(self)}-{start or self.starts}.log"

    async def start(self, metadata: tuple = ()) -> None:
        """Starts it and waits until it answers (to a caller with metadata), polling with
        asyncio.sleep so that servers on the caller's event loop (the fake trainer) keep serving."""
        if not await self._start_on(self.port, metadata):
            assert self.port, self.log_path().read_text()
            await self._start_on(0, metadata)

    async def _start_on(self, port: int, metadata: tuple) -> bool:
        """True once it answers; False if the process could not bind `port`."""
        import asyncio
        import subprocess
        import sys

        from grpc import aio

        from paddleray.scheduler.v1 import job_service_pb2 as js
        from paddleray.scheduler.v1 import job_service_pb2_grpc
        from paddleray.services.localstack.ports import read_ready_file

        self.starts += 1
        ready_file = self.log_dir / f"scheduler-{id(self)}-{self.starts}.ready.json"
        env = {**self.env, "PADDLERAY_SCHEDULER_PORT": str(port), "PADDLERAY_SCHEDULER_READY_FILE": str(ready_file)}
        with open(self.log_path(), "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "paddleray.services.scheduler"], env=env,
                                         stdout=log, stderr=log)
        async with asyncio.timeout(60):
            while (ready := read_ready_file(ready_file)) is None:
                if self.proc.poll() is not None:
                    log_text = self.log_path().read_text()
                    assert port and ("could not bind" in log_text or "Failed to bind" in log_text), log_text
                    return False
                await asyncio.sleep(0.05)
            self.port = ready["port"]
            while True:
                assert self.proc.poll() is None, self.log_path().read_text()
                async with aio.insecure_channel(self.address) as channel:
                    try:
                        await job_service_pb2_grpc.JobServiceStub(channel).ListJobs(js.ListJobsRequest(page_size=1),
                                                                                    timeout=1, metadata=metadata)
                        return True
                    except aio.AioRpcError:
                        await asyncio.sleep(0.1)

    async def start_until_bound(self, timeout: float = 120) -> None:
        """Starts it on port 0 and waits for its ready file only (the server listens; health says
        whether it serves): for a scheduler that is never to answer a call (a wrong Redis
        password), whose start-up under load can take longer than any fixed "it did not answer"."""
        import asyncio

        from paddleray.services.localstack.ports import read_ready_file

        ready_file = self._launch()
        async with asyncio.timeout(timeout):
            while (ready := read_ready_file(ready_file)) is None:
                assert self.proc.poll() is None, self.log_path().read_text()
                await asyncio.sleep(0.05)
        self.port = ready["port"]

    def _launch(self):
        """Starts the scheduler process on a free port; returns the ready file it will write."""
        import subprocess
        import sys

        self.starts += 1
        ready_file = self.log_dir / f"scheduler-{id(self)}-{self.starts}.ready.json"
        env = {**self.env, "PADDLERAY_SCHEDULER_PORT": "0", "PADDLERAY_SCHEDULER_READY_FILE": str(ready_file)}
        with open(self.log_path(), "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "paddleray.services.scheduler"], env=env,
                                         stdout=log, stderr=log)
        return ready_file

    def start_until_serving(self, timeout: float = 60) -> None:
        """Starts it and waits for gRPC health SERVING only: for a scheduler whose RPCs refuse
        an anonymous caller (the auth tests), where `start`'s ListJobs probe would never pass."""

        from paddleray.services.localstack.health import serving
        from paddleray.services.localstack.ports import read_ready_file, wait_until

        ready_file = self._launch()

        def ready():
            assert self.proc.poll() is None, self.log_path().read_text()
            return read_ready_file(ready_file)

        self.port = wait_until(ready, timeout=timeout, interval=0.05, message="the scheduler's ready file")["port"]
        wait_until(lambda: serving(self.address), timeout=timeout, interval=0.2, message="the scheduler to serve")

    def kill(self) -> None:
        import signal

        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)
