"""A local Ray head started with `ray start --head --block` on free ports.

Never on 6379 (Redis holds it here) and never stopped with `ray stop`, which would kill every
Ray on the machine: SIGINT to the blocking `ray start` stops exactly this head.
Token authentication stays on (Ray's default for new clusters): the token is generated once
into ~/.ray/auth_token, and every process given RAY_AUTH_MODE=token reads it from there.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from paddleray.services.exporter.serving.node_env import (
    HAPROXY_PORT_DEFAULTS,
    SERVE_NODE_ENV,
    haproxy_binary_env,
    haproxy_env,
)
from paddleray.services.localstack.ports import PortTaken, free_port, start_on_free_ports, stop_process, wait_until

AUTH_ENV = {"RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0"}
# What the head's own processes (raylet, and the Serve proxy it starts) also need.
HEAD_ENV = {**AUTH_ENV, **SERVE_NODE_ENV, **haproxy_binary_env()}

_STARTED = "Ray runtime started"
# How Ray's processes (GCS, raylet, agents, Ray Client server) say a port they were given is taken.
_BIND_FAILURE = re.compile(r"(address already in use|failed to bind|failed to start the grpc server|port \S+ (is )?(already )?in use|bind\(\) failed)", re.I)
_COMPONENT_FAILED = re.compile(r"(timed out during startup|failed to start GCS|raylet.*(failed|died))", re.I)


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


_COMPONENT_PORT_FLAGS = ("ray-client-server-port", "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                         "metrics-export-port", "runtime-env-agent-port")


def _other_free_ports(count: int, taken: set[int | None]) -> list[int]:
    """Free ports, distinct from each other and from `taken`: a head restarted on its fixed port
    is not listening on it yet, so free_port() may return it, and ray start refuses a port two
    components share (seen once: "client_server is trying to use a port number ... that is used
    by other components")."""
    ports: list[int] = []
    while len(ports) < count:
        candidate = free_port()
        if candidate not in taken and candidate not in ports:
            ports.append(candidate)
    return ports


@dataclass
class RayHead:
    """`ray start --head --block` on free ports (GCS, Ray Client, agents, metrics, and the ports
    Serve's HAProxy opens besides its endpoints: node_env.haproxy_env, with its state in a
    short folder of its own, not the host-wide /tmp/haproxy-serve).

    With port 0 (the default) every port is chosen here, and all of them again when the head
    fails to bind one of them (another process took it between the choice and the bind). The
    HAProxy ports are chosen once and kept when the same head is started again.
    """

    num_cpus: int = 2
    num_gpus: int = 0
    port: int = 0
    log_file: Path | None = None
    # The dashboard serves Ray's Jobs API (the dispatch benchmark's baseline); off otherwise.
    # 0 asks for one on a free port (read dashboard_port after start).
    dashboard_port: int | None = None
    # Custom resources and Ray node labels of the head (ray start --resources / --labels).
    resources: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    # More environment for the head's processes: Ray system config as RAY_<name> variables,
    # such as the node health-check period a test of node loss shortens (ray_cluster.py).
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen | None = None
    haproxy_ports: dict[str, int] = field(default_factory=dict)
    haproxy_dir: Path | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 90) -> RayHead:
        ensure_auth_token()
        # Read when ray start fails: it is how a port it could not bind shows.
        log_file = self.log_file = self.log_file or Path(tempfile.mkdtemp(prefix="paddleray-ray-head-")) / "ray.log"
        if self.port:
            # The same GCS port each attempt (a restarted head keeps its address), its other ports
            # chosen anew: a component that lost a port race, or a raylet that did not register
            # within Ray's fixed 30 s on a loaded host ("timed out during startup"), is tried again.
            start_on_free_ports(lambda: self._start_on(log_file, self.port, self.dashboard_port, timeout),
                                f"the Ray head on port {self.port}")
        else:
            start_on_free_ports(
                lambda: self._start_on(
                    log_file, free_port(), free_port() if self.dashboard_port == 0 else self.dashboard_port, timeout
                ),
                "the Ray head",
            )
        return self

    def _start_on(self, log_file: Path, port: int, dashboard_port: int | None, timeout: float) -> None:
        if not self.haproxy_ports:
            self.haproxy_ports = dict(zip(HAPROXY_PORT_DEFAULTS, _other_free_ports(
                len(HAPROXY_PORT_DEFAULTS), {port, dashboard_port}), strict=True))
        if self.haproxy_dir is None:
            # Short: HAProxy's admin and metrics sockets live under <dir>/<56-char node id>/, and a
            # socket path longer than 97 characters stops HAProxy at start-up.
            self.haproxy_dir = Path(tempfile.mkdtemp(prefix="prhap-", dir="/tmp"))
        else:
            reap_haproxy(self.haproxy_dir)  # left by a crash of this head: it holds the ports
        args = [
            ray_executable(), "start", "--head", "--block",
            f"--port={port}", f"--num-cpus={self.num_cpus}", f"--num-gpus={self.num_gpus}",
            *(
                ["--include-dashboard=true", f"--dashboard-port={dashboard_port}"]
                if dashboard_port else ["--include-dashboard=false"]
            ),
            "--disable-usage-stats",
            *node_identity_args(self.resources, self.labels),
            # Ports of its own, so that several heads (parallel test runs) never clash.
            *(f"--{flag}={p}" for flag, p in zip(_COMPONENT_PORT_FLAGS, _other_free_ports(
                len(_COMPONENT_PORT_FLAGS), {port, dashboard_port, *self.haproxy_ports.values()}), strict=True)),
        ]
        env = {**HEAD_ENV, **haproxy_env(self.haproxy_ports, self.haproxy_dir), **self.env}
        process = launch_ray_node(args, env, log_file, timeout, "the Ray head")
        self.port, self.process = port, process
        self.dashboard_port = dashboard_port

    def stop(self) -> None:
        """Stops the head (if it runs) and any HAProxy its Serve left (see reap_haproxy)."""
        if self.process is not None:
            stop_ray_head(self.process.pid)
            self.process.wait()
            self.process = None
        if self.haproxy_dir is not None:
            reap_haproxy(self.haproxy_dir)


def reap_haproxy(haproxy_dir: Path) -> list[int]:
    """Kills the HAProxy processes whose config is under haproxy_dir (this head's own folder).

    Serve's HAProxy manager starts HAProxy as a child process with nothing that ends it with
    the manager: after a head crash (SIGKILL of its process group) the manager's worker ends,
    and its HAProxy lives on as an orphan, holding the serving ports with dead backends
    (seen: still there 5 minutes later). A head stopped or started again ends them.
    """
    marker = f"{Path(haproxy_dir)}/".encode()
    killed = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmdline and cmdline[0].endswith(b"/haproxy") and any(arg.startswith(marker) for arg in cmdline):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
                killed.append(int(pid))
    return killed


def node_identity_args(resources: dict[str, float], labels: dict[str, str]) -> list[str]:
    """ray start's flags for a node's custom resources and labels."""
    args = [f"--resources={json.dumps(resources)}"] if resources else []
    if labels:
        args.append("--labels=" + ",".join(f"{k}={v}" for k, v in labels.items()))
    return args


def launch_ray_node(args: list[str], env: dict[str, str], log_file: Path, timeout: float, what: str) -> subprocess.Popen:
    """Runs a blocking `ray start` in a session of its own (its process group is the node's:
    raylet, agents, log monitor) and returns it once Ray says the node is up.

    Raises PortTaken when a component could not bind a port it was given (the caller picks
    new ones), RuntimeError for any other failure; a node that failed is stopped."""
    with open(log_file, "ab") as out:
        offset = out.tell()
        process = subprocess.Popen(
            args, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )

    def log_tail() -> str:
        with open(log_file, "rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def up() -> bool:
        if process.poll() is not None:
            tail = log_tail()
            if _BIND_FAILURE.search(tail) or _COMPONENT_FAILED.search(tail):
                # A component that cannot bind its port says so in its own log under the
                # session folder, and ray start only that the node did not come up.
                raise PortTaken(f"ray start exited with {process.returncode}: {tail.strip().splitlines()[-1]}")
            raise RuntimeError(f"ray start exited with {process.returncode}: {tail[-3000:]}")
        # Printed once every process of the node is up: an open port alone may be another program's.
        return _STARTED in log_tail()

    try:
        wait_until(up, timeout=timeout, interval=0.1, message=f"{what} to start")
    except BaseException:
        if process.poll() is None:
            stop_ray_head(process.pid)
        raise
    return process


def stop_ray_head(pid: int, timeout: float = 10) -> None:
    """Stops the head whose blocking `ray start` has this pid."""
    # `ray start --block` stops its head's processes on SIGINT, as on Ctrl-C: 2-5 s here. With
    # busy workers it sometimes waited out the whole grace (30 s, three times a CI run); a local
    # head keeps nothing worth a longer wait, so its process group is killed after 10 s.
    stop_process(pid, timeout, signal.SIGINT)
