"""The real scheduler process on a private redis-server, as the scheduler and scale benchmarks run it.

Dispatch is off (only the create and read paths are measured); the scheduler binds port 0 and
reports its port in its ready file; Redis is started as the local stack starts it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass
class SchedulerOnRedis:
    address: str
    redis_url: str
    workdir: Path


@contextlib.contextmanager
def scheduler_on_private_redis(prefix: str) -> Iterator[SchedulerOnRedis]:
    from paddleray.services.localstack.ports import read_ready_file, wait_until
    from paddleray.services.localstack.redis_process import RedisProcess

    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    redis_server = RedisProcess(workdir / "redis").start()
    ready_file = workdir / "scheduler.ready.json"
    env = {**os.environ, "PADDLERAY_SCHEDULER_REDIS_URL": redis_server.url, "PADDLERAY_SCHEDULER_PORT": "0",
           "PADDLERAY_SCHEDULER_READY_FILE": str(ready_file),
           "PADDLERAY_SCHEDULER_DISPATCH": "false", "PADDLERAY_SCHEDULER_LOG_LEVEL": "WARNING"}
    log = open(workdir / "scheduler.log", "wb")  # noqa: SIM115 - closed below
    scheduler = subprocess.Popen([sys.executable, "-m", "paddleray.services.scheduler"], env=env, stdout=log,
                                 stderr=subprocess.STDOUT)

    def ready() -> dict | None:
        if scheduler.poll() is not None:
            raise RuntimeError(f"the scheduler exited with {scheduler.returncode}; see {workdir / 'scheduler.log'}")
        return read_ready_file(ready_file)

    try:
        port = wait_until(ready, timeout=60, message="the scheduler ready file")["port"]
        yield SchedulerOnRedis(f"127.0.0.1:{port}", redis_server.url, workdir)
    finally:
        scheduler.terminate()
        scheduler.wait(30)
        log.close()
        redis_server.stop()
