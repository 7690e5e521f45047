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
    """`python -m paddleray.services.scheduler` as a real child process, killable with SIGKILL."""

    def __init__(self, redis_url: str, trainer_address: str, log_dir, **settings) -> None:
        import os

        from support import free_port

        self.port = free_port()
        self.log_dir = log_dir
        self.env = {
            **os.environ,
            "PADDLERAY_SCHEDULER_REDIS_URL": redis_url,
            "PADDLERAY_SCHEDULER_TRAINER_ADDRESS": trainer_address,
            "PADDLERAY_SCHEDULER_PORT": str(self.port),
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

    def log_path(self):
        return self.log_dir / f"scheduler-{self.port}-{self.starts}.log"

    async def start(self, metadata: tuple = ()) -> None:
        """Starts it and waits until it answers (to a caller with metadata), polling with
        asyncio.sleep so that servers on the caller's event loop (the fake trainer) keep serving."""
        import asyncio
        import subprocess
        import sys

        from grpc import aio

        from paddleray.scheduler.v1 import job_service_pb2 as js
        from paddleray.scheduler.v1 import job_service_pb2_grpc

        self.starts += 1
        with open(self.log_path(), "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "paddleray.services.scheduler"], env=self.env,
                                         stdout=log, stderr=log)
        async with asyncio.timeout(60):
            while True:
                assert self.proc.poll() is None, self.log_path().read_text()
                async with aio.insecure_channel(self.address) as channel:
                    try:
                        await job_service_pb2_grpc.JobServiceStub(channel).ListJobs(js.ListJobsRequest(page_size=1),
                                                                                    timeout=1, metadata=metadata)
                        return
                    except aio.AioRpcError:
                        await asyncio.sleep(0.1)

    def kill(self) -> None:
        import signal

        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)
