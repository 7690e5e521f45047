"""A redis-server of the test's own with a password, a TLS port, and AOF durability, restartable
on the same ports (to take it away from a running scheduler and bring it back)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import redis

from paddleray.services.localstack.ports import free_port, wait_until
from support.tls import TestCA


@dataclass
class SecureRedis:
    directory: Path
    password: str
    ca: TestCA | None = None
    port: int = field(default_factory=free_port)
    tls_port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def tls_url(self) -> str:
        return f"rediss://127.0.0.1:{self.tls_port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, password=self.password, socket_connect_timeout=0.5)

    def _answers(self) -> bool:
        try:
            with self.client() as client:
                return bool(client.ping())
        except redis.ConnectionError:
            return False

    def start(self) -> SecureRedis:
        self.directory.mkdir(parents=True, exist_ok=True)
        args = [shutil.which("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.directory), "--save", "", "--appendonly", "yes", "--appendfsync", "always",
                "--requirepass", self.password]
        if self.ca is not None:
            args += ["--tls-port", str(self.tls_port), "--tls-cert-file", str(self.ca.server.cert),
                     "--tls-key-file", str(self.ca.server.key), "--tls-ca-cert-file", str(self.ca.ca),
                     "--tls-auth-clients", "no"]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self._answers, timeout=10, message=f"redis-server on port {self.port}")
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None
