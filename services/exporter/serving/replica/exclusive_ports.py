"""Runs in: a Serve replica.

Serve replicas' direct-ingress gRPC ports bound without SO_REUSEPORT, as Serve intends.

Ray Serve 2.60 starts each replica's direct-ingress gRPC server with
`enable_so_reuseport=False` (`ray.serve._private.grpc_util.start_grpc_server`), but hands grpc the channel argument
as the string "0"; grpc reads `grpc.so_reuseport` as an integer and ignores a string, so the
port is bound with SO_REUSEPORT, grpc's default. Serve allocates these ports per Ray node, so
wherever two nodes (or two installations) share a host their replicas got the same port
(40000 for all of them, seen with `ss`), and the kernel spread HAProxy's connections over
every replica on it: a model's requests were answered by another model's replica (NOT_FOUND
"Application ... not found"), a health probe passed or failed by chance (a deployment took
6 minutes to show HEALTHY), and after a node loss requests failed for seconds. With the
argument an integer, the second bind fails and Serve's retry takes the next port
(tests/unit/exporter/test_exclusive_ports.py).

`install()` runs where the replicas import the serving code (model_app.py), before Serve
starts their servers (after the deployment's constructor).
"""

from __future__ import annotations

import functools
from typing import Any

_OPTION = "grpc.so_reuseport"


def install() -> None:
    """Makes Serve's gRPC servers pass grpc.so_reuseport as an integer (idempotent)."""
    from paddleray.services.common import ray_private

    gRPCGenericServer = ray_private.serve_grpc_server_class()  # noqa: N806 - Serve's class
    original = gRPCGenericServer.__init__
    if getattr(original, "_paddleray_exclusive_ports", False):
        return

    @functools.wraps(original)
    def __init__(self, service_handler_factory, *, extra_options: list[tuple[str, Any]] | None = None) -> None:
        options = [(key, int(value) if key == _OPTION else value) for key, value in (extra_options or [])]
        original(self, service_handler_factory, extra_options=options)

    __init__._paddleray_exclusive_ports = True  # type: ignore[attr-defined]
    gRPCGenericServer.__init__ = __init__
