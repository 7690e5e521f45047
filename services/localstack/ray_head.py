"""A local Ray head started with `ray start --head --block` on free ports.

Never on 6379 (Redis holds it here) and never stopped with `ray stop`, which would kill every
Ray on the machine: SIGINT to the blocking `ray start` stops exactly this head.
Token authentication stays on (Ray's default for new clusters): the token is generated once
into ~/.ray/auth_token, and every process given RAY_AUTH_MODE=token reads it from there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from paddleray.services.localstack.ports import free_port, port_open, stop_process, wait_until

AUTH_ENV = {"RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0"}


def ray_executable() -> str:
    return str(Path(sys.executable).with_name("ray"))


def ensure_auth_token() -> None:
    if (Path.home() / ".ray" / "auth_token").exists():
        return
    # The command prints the token; keep it out of logs.
    subprocess.run(
        [ray_executable(), "get-auth-token", "--generate"],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **AUTH_ENV},
    )


@dataclass
class RayHead:
    num_cpus: int = 2
    num_gpus: int = 0
    port: int = field(default_factory=free_port)
    log_file: Path | None = None
    # The dashboard serves Ray's Jobs API (the dispatch benchmark's baseline); off otherwise.
    dashboard_port: int | None = None
    process: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 90) -> RayHead:
        ensure_auth_token()
        args = [
            ray_executable(), "start", "--head", "--block",
            f"--port={self.port}", f"--num-cpus={self.num_cpus}", f"--num-gpus={self.num_gpus}",
            *(
                ["--include-dashboard=true", f"--dashboard-port={self.dashboard_port}"]
                if self.dashboard_port else ["--include-dashboard=false"]
            ),
            "--disable-usage-stats",
            # Ports of its own, so that several heads (parallel test runs) never clash.
            f"--ray-client-server-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
            f"--dashboard-agent-grpc-port={free_port()}", f"--metrics-export-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}",
        ]
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            args, env={**os.environ, **AUTH_ENV}, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        wait_until(self._up, timeout=timeout, message="the Ray head's GCS port")
        return self

    def _up(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"ray start exited with {self.process.returncode}")
        return port_open(self.port)

    def stop(self) -> None:
        if self.process is None:
            return
        stop_ray_head(self.process.pid)
        self.process.wait()
        self.process = None


def stop_ray_head(pid: int, timeout: float = 30) -> None:
    """Stops the head whose blocking `ray start` has this pid."""
    # `ray start --block` stops its head's processes on SIGINT, as on Ctrl-C.
    stop_process(pid, timeout, signal.SIGINT)
