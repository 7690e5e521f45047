"""A redis-server of our own on a free port (for the local stack and tests)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import redis

from paddleray.services.localstack.ports import free_port, wait_until

INSTALL_HINT = "apt-get install -y redis-server   (or: make setup, which installs it)"


def redis_reachable(url: str) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=0.5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.ConnectionError, redis.TimeoutError, ValueError):
        return False


@dataclass
class RedisProcess:
    """redis-server in `directory`; `durable` keeps an fsync'd append-only file across restarts."""

    directory: Path
    durable: bool = False
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisProcess:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(f"redis-server is not installed; install it with: {INSTALL_HINT}")
        self.directory.mkdir(parents=True, exist_ok=True)
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory), "--save", ""]
        args += ["--appendonly", "yes", "--appendfsync", "always"] if self.durable else ["--appendonly", "no"]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        wait_until(lambda: redis_reachable(self.url), timeout=10, message=f"redis-server on port {self.port}")
        return self

    def kill(self) -> None:
        """SIGKILL, as in a crash."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None
