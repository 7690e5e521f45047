"""A redis-server of our own on a free port (for the local stack and tests)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import redis

from paddleray.services.common.redis_client import RedisSettings, connect_blocking
from paddleray.services.localstack.ports import PortTaken, free_port, start_on_free_ports, wait_until

# The scheduler's job hash holds the Job proto (a few hundred bytes): above 64 bytes a value
# turns the hash into a hashtable (about 2.5 KB per queued job instead of 1.4 KB, measured by
# `python -m bench scale`). The deploy manifests set the same; docs/scaling.md says why.
MEMORY_ARGS = ("--hash-max-listpack-value", "1024")
INSTALL_HINT = "apt-get install -y redis-server   (or: make setup, which installs it)"


def redis_reachable(given: RedisSettings | str) -> bool:
    """Whether the Redis (a URL, or settings with its password and CA) answers PING to its credentials."""
    settings = RedisSettings(redis_url=given) if isinstance(given, str) else given
    try:
        client = connect_blocking(settings, socket_connect_timeout=0.5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError):  # refused, unreachable, NOAUTH or a wrong password, a bad URL
        return False


def _server_pid(url: str) -> int | None:
    """The process id of the redis-server answering at url, or None if none answers."""
    try:
        client = connect_blocking(RedisSettings(redis_url=url), socket_connect_timeout=0.5)
        try:
            return int(client.info("server")["process_id"])
        finally:
            client.close()
    except (redis.ConnectionError, redis.TimeoutError, ValueError):
        return None


@dataclass
class RedisProcess:
    """redis-server in `directory`; `durable` keeps an fsync'd append-only file across restarts.

    With port 0 (the default) it runs on a free port, chosen again if another process binds
    it first (redis-server's own `port 0` would mean no TCP listener at all); after the first
    start the port is kept, so a restart after kill() comes back at the same address.
    """

    directory: Path
    durable: bool = False
    port: int = 0
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log_file(self) -> Path:
        return self.directory / "redis.log"

    def start(self) -> RedisProcess:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(f"redis-server is not installed; install it with: {INSTALL_HINT}")
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.port:
            self._start_on(binary, self.port)
        else:
            start_on_free_ports(lambda: self._start_on(binary, free_port()), "redis-server")
        return self

    def _start_on(self, binary: str, port: int) -> None:
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(self.directory),
                "--save", "", *MEMORY_ARGS]
        args += ["--appendonly", "yes", "--appendfsync", "always"] if self.durable else ["--appendonly", "no"]
        with open(self.log_file, "ab") as log:
            offset = log.tell()
            process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        url = f"redis://127.0.0.1:{port}/0"

        def ours_answers() -> bool:
            if process.poll() is not None:
                with open(self.log_file, "rb") as log:
                    log.seek(offset)
                    tail = log.read().decode(errors="replace")
                if "Address already in use" in tail:
                    raise PortTaken(f"port {port} is taken")
                raise RuntimeError(f"redis-server exited with {process.returncode}: {tail[-2000:]}")
            # Another Redis may answer on the port while ours fails to bind it.
            return _server_pid(url) == process.pid

        try:
            wait_until(ours_answers, timeout=10, message=f"redis-server on port {port}")
        except BaseException:
            if process.poll() is None:
                process.kill()
                process.wait()
            raise
        self.port, self.process = port, process

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
