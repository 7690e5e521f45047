"""Runs in: the exporter process, and choose_ports' check in a Ray task on the head node.

The ports Serve's HAProxy listens on, checked where it listens: on the Ray head node.

Serve binds its gRPC and HTTP frontends once, when it starts, and HAProxy binds them without
SO_REUSEPORT (Serve starts it with -dR), so a port another process holds (another
installation's Serve on the same host, any program) would make HAProxy fail to start. Before
Serve starts on a cluster, a task on the head node tries each wanted port and, for one that is
held, takes a free one instead; the controller publishes what it got (endpoint_note). The check
runs on the head because the exporter may be on another node (compose, KubeRay), where the
head's ports look free.
"""

from __future__ import annotations

import socket
from typing import Any

from paddleray.services.common.ray_connection import in_daemon_thread

_TIMEOUT_S = 60.0


def bindable(host: str, port: int) -> bool:
    """Whether a listener could take host:port now (nothing else listens there).

    With SO_REUSEADDR, as HAProxy binds: the connections a listener closed on the port linger
    in TIME_WAIT for a minute after it stops (a REST client's "Connection: close" leaves them
    on the server's side), and a plain bind() would call the port held then, moving the
    endpoint of a Serve restarted on the same head (a head restart) for no reason.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def settle(host: str, wanted: tuple[int, ...]) -> tuple[int, ...]:
    """Each wanted port, or a free one where it is held (run on the node that binds them)."""
    chosen: list[int] = []
    for port in wanted:
        replacement = port
        while not bindable(host, replacement) or replacement in chosen:
            replacement = free_port(host)
        chosen.append(replacement)
    return tuple(chosen)


async def choose_ports(host: str, wanted: tuple[int, ...]) -> tuple[int, ...]:
    """settle() on the Ray head node (in a task pinned there)."""
    ref = await in_daemon_thread(lambda: _task(_head_node_id()).remote(host, wanted))
    return tuple(await _bounded(ref))


async def _bounded(ref: Any) -> Any:
    import asyncio

    return await asyncio.wait_for(ref, _TIMEOUT_S)


def _head_node_id() -> str:
    import ray

    for node in ray.nodes():
        if node.get("Alive") and "node:__internal_head__" in (node.get("Resources") or {}):
            return str(node["NodeID"])
    raise RuntimeError("no live head node in ray.nodes()")


def _task(node_id: str) -> Any:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return ray.remote(num_cpus=0, max_retries=0)(settle).options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
