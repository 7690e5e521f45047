"""An exporter (real gRPC server, real Redis, the session's shared Ray head) served in-process."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from paddleray.exporter.v1 import exporter_service_pb2_grpc
from paddleray.services.exporter.settings import ExporterSettings
from support import free_port
from support.exporter import BUILDERS, EXAMPLES, ExporterClient, exporter_thread, flush


@pytest.fixture(scope="module")
def storage_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("exporter-storage")


@pytest.fixture(scope="module")
def scheduler_address() -> str:
    """No scheduler: modules that export jobs override this with a real one."""
    return ""


@pytest.fixture(scope="module")
def exporter(ray_cluster, redis_server, storage_root, scheduler_address):
    flush(redis_server.url)  # a module's exporter starts from an empty registry
    settings = ExporterSettings(
        port=0, redis_url=redis_server.url, ray_address=ray_cluster, storage_root=storage_root,
        builder_allowlist=[EXAMPLES, BUILDERS], scheduler_address=scheduler_address, export_num_cpus=0.5,
        serving_grpc_port=free_port(), serving_http_port=free_port(),
    )
    thread = exporter_thread(settings)
    yield thread
    thread.stop()


@pytest.fixture
def client(exporter):
    with grpc.insecure_channel(exporter.address) as channel:
        yield ExporterClient(exporter_service_pb2_grpc.ExporterServiceStub(channel))
