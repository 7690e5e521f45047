"""A multi-node Ray cluster on one host: a head and worker nodes, each a raylet of its own.

Ray tests multi-node behaviour the same way (`ray start --address=<head>` per node): each node
has its own raylet, object store, resources and worker processes, and Ray schedules across
them as across machines. Every node carries a label naming it, twice: a custom resource
`paddleray-node:<name>` (1 unit; GetClusterResources shows it, and a job can ask for a
fraction of it to land on that node) and the Ray node label `paddleray.io/node=<name>`.

Each node is a blocking `ray start` in a session of its own, so its process group holds its
raylet and agents; the node's worker processes (the actors) run in sessions of their own, as
the raylet's children. `kill()` SIGKILLs the group and every process below it at once, as a
machine that dies takes all of them (a worker left running would go on training and writing
checkpoints after its node was declared dead: seen alive 1 s after its raylet was killed).
Nodes start one at a time: raylets starting together on one host race on the session's files.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from paddleray.services.localstack.ports import free_port, pid_alive, start_on_free_ports
from paddleray.services.localstack.ray_head import (
    HEAD_ENV,
    RayHead,
    launch_ray_node,
    node_identity_args,
    ray_executable,
    stop_ray_head,
)

NODE_RESOURCE_PREFIX = "paddleray-node:"
NODE_LABEL = "paddleray.io/node"
HEAD_NAME = "head"
# Ray marks a node dead after it missed health checks for period x threshold (3 s x 5 by
# default, plus the timeout: 16.6 s measured here). Tests of node loss shorten it on the head
# (the GCS runs the checks) to about 1.5 s; a real cluster keeps Ray's defaults, which ride
# out a busy node or a network blip.
FAST_NODE_DEATH_ENV = {
    "RAY_health_check_initial_delay_ms": "500",
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "500",
    "RAY_health_check_failure_threshold": "3",
}
_NODE_PORT_FLAGS = ("node-manager-port", "object-manager-port", "dashboard-agent-listen-port",
                    "dashboard-agent-grpc-port", "metrics-export-port", "runtime-env-agent-port")


def node_resource(name: str) -> str:
    """The custom resource naming a node."""
    return f"{NODE_RESOURCE_PREFIX}{name}"


def node_name(resources: dict[str, float]) -> str:
    """The name of the node whose resources these are ("" for a node without a label)."""
    return next((k.removeprefix(NODE_RESOURCE_PREFIX) for k in resources if k.startswith(NODE_RESOURCE_PREFIX)), "")


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (Linux /proc; none where there is no /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid ...": comm may hold spaces, so split after its ")".
            fields = entry.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # gone meanwhile
        children.setdefault(int(fields[1]), []).append(int(entry.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_node_processes(pid: int) -> None:
    """SIGKILL of the process group of the node whose blocking `ray start` has this pid, and of
    every process below it (its workers run in sessions of their own)."""
    below = descendants(pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    for child in below:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


@dataclass
class RayWorkerNode:
    """One worker node: `ray start --address=<head> --block` with its resources and label."""

    head_address: str
    name: str
    num_cpus: int = 1
    num_gpus: int = 0
    object_store_bytes: int = 256 << 20
    log_file: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        """The blocking `ray start`; also the id of the node's process group."""
        assert self.process is not None, f"node {self.name} is not running"
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and pid_alive(self.process.pid)

    def start(self, timeout: float = 120) -> RayWorkerNode:
        log_file = self.log_file = self.log_file or Path(tempfile.mkdtemp(prefix="paddleray-ray-node-")) / "ray.log"

        def start_once() -> subprocess.Popen:
            ports: list[int] = []
            while len(ports) < len(_NODE_PORT_FLAGS):
                if (port := free_port()) not in ports:
                    ports.append(port)
            args = [
                ray_executable(), "start", f"--address={self.head_address}", "--block",
                f"--num-cpus={self.num_cpus}", f"--num-gpus={self.num_gpus}",
                f"--object-store-memory={self.object_store_bytes}", "--disable-usage-stats",
                *node_identity_args({node_resource(self.name): 1.0}, {NODE_LABEL: self.name}),
                *(f"--{flag}={port}" for flag, port in zip(_NODE_PORT_FLAGS, ports, strict=True)),
            ]
            return launch_ray_node(args, {**HEAD_ENV, **self.env}, log_file, timeout, f"Ray node {self.name}")

        self.process = start_on_free_ports(start_once, f"Ray node {self.name}")
        return self

    def kill(self) -> None:
        """The node lost without any goodbye (kill_node_processes)."""
        self._end(kill_node_processes)

    def stop(self) -> None:
        """A clean stop (SIGINT to the blocking `ray start`, its group killed after 10 s)."""
        self._end(stop_ray_head)

    def _end(self, end_group: Callable[[int], object]) -> None:
        if self.process is None:
            return
        end_group(self.process.pid)
        self.process.wait()
        self.process = None


@dataclass
class LocalCluster:
    """A head and named worker nodes on this host; the services connect to `address`.

    head_cpus 0 keeps training and serving off the head, as a KubeRay head usually is.
    """

    node_cpus: list[int] = field(default_factory=lambda: [1, 1])
    head_cpus: int = 0
    log_dir: Path | None = None
    # Environment of every node (and the head): FAST_NODE_DEATH_ENV in tests of node loss.
    env: dict[str, str] = field(default_factory=dict)
    object_store_bytes: int = 256 << 20
    head: RayHead | None = None
    nodes: dict[str, RayWorkerNode] = field(default_factory=dict)

    @property
    def address(self) -> str:
        assert self.head is not None, "the cluster is not started"
        return self.head.address

    def start(self) -> LocalCluster:
        log_dir = self.log_dir = self.log_dir or Path(tempfile.mkdtemp(prefix="paddleray-ray-cluster-"))
        log_dir.mkdir(parents=True, exist_ok=True)
        self.head = RayHead(num_cpus=self.head_cpus, log_file=log_dir / "head.log", env=dict(self.env),
                            resources={node_resource(HEAD_NAME): 1.0}, labels={NODE_LABEL: HEAD_NAME})
        try:
            self.head.start()
            for index, cpus in enumerate(self.node_cpus, start=1):
                self.add_node(f"node-{index}", cpus)
        except BaseException:
            self.stop()
            raise
        return self

    def add_node(self, name: str, num_cpus: int = 1) -> RayWorkerNode:
        node = RayWorkerNode(self.address, name, num_cpus=num_cpus, object_store_bytes=self.object_store_bytes,
                             log_file=self.log_dir / f"{name}.log" if self.log_dir else None, env=dict(self.env))
        self.nodes[name] = node.start()
        return node

    def kill_node(self, name: str) -> None:
        self.nodes[name].kill()

    def restart_node(self, name: str) -> RayWorkerNode:
        """The node joins again under its name (a new Ray node id), after a kill or a stop."""
        node = self.nodes[name]
        node.stop()
        return node.start()

    def stop(self) -> None:
        for node in reversed(list(self.nodes.values())):
            node.stop()
        if self.head is not None:
            self.head.stop()
