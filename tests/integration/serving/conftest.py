"""One Serve instance for the serving tests (Serve start is slow), on the shared Ray head.

Package-scoped (this folder is a package for that: pytest ends a package fixture with the
folder only then): Serve is shut down after the last serving test, so that its replicas hold none
of the shared head's 2 CPUs when the trainer's tests run (a 1-CPU worker did not fit beside
them, and every trainer test waited out its timeout)."""

from __future__ import annotations

import asyncio

import pytest

from paddleray.services.exporter.serving.control.controller import ServingController
from paddleray.services.localstack.ports import free_port
from support.serving import export_model


@pytest.fixture(scope="package")
def controller(ray_cluster):
    from ray import serve

    # Serve keeps the gRPC port it was first started with; an exporter of an earlier test (the
    # e2e demo) may have left one running on this shared Ray head, so start from none.
    serve.shutdown()
    ctl = ServingController(grpc_port=free_port(), http_host="127.0.0.1", http_port=free_port(), deploy_timeout_s=240)
    asyncio.run(ctl.start())
    yield ctl
    asyncio.run(ctl.stop(shutdown_serve=True))


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory):
    """Two versions of the MLP (different weights) and the two-input model, as real exports."""
    root = tmp_path_factory.mktemp("serving-artifacts")
    return {
        "mlp1": export_model(root / "mlp" / "1", "mlp", seed=1, version=1),
        "mlp2": export_model(root / "mlp" / "2", "mlp", seed=2, version=2),
        "two": export_model(root / "two" / "1", "two", seed=3, version=1),
    }
