"""HEALTHCHECK of the paddleray images: is what this container runs able to serve?

One image runs several roles, so the check follows the role's own settings: a service
container has PADDLERAY_<SERVICE>_PORT set and must answer grpc.health.v1 SERVING on it
(the trainer says NOT_SERVING while its Ray cluster is away); any other container is a Ray
node, checked with `ray health-check` against RAY_ADDRESS (the head's GCS).
Kubernetes ignores HEALTHCHECK and uses the probes in deploy/k8s and deploy/kuberay.
Exit status 0 = healthy, 1 = not.
"""

from __future__ import annotations

import os
import subprocess
import sys

SERVICES = ("SCHEDULER", "TRAINER", "EXPORTER")


def grpc_serving(port: int, timeout: float = 3.0) -> bool:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout).status
    except grpc.RpcError:
        return False
    return status == health_pb2.HealthCheckResponse.SERVING


def main(environ: dict[str, str]) -> int:
    ports = [int(environ[f"PADDLERAY_{s}_PORT"]) for s in SERVICES if environ.get(f"PADDLERAY_{s}_PORT")]
    if ports:
        return 0 if all(grpc_serving(port) for port in ports) else 1
    address = environ.get("RAY_ADDRESS", "127.0.0.1:6379")
    result = subprocess.run(["ray", "health-check", "--address", address], capture_output=True, timeout=20)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main(dict(os.environ)))
