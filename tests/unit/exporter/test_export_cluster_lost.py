"""Exports in flight when the Ray cluster is lost end FAILED (WORKER_LOST) with the reason, on a
real Redis; the runner stands for an export task whose cluster went: its stream neither yields
nor ends. (A whole head restart under a real exporter: tests/e2e/test_exporter_ray_connection.py.)"""

from __future__ import annotations

import asyncio

import pytest

from paddleray.common.v1 import common_pb2
from paddleray.exporter.v1 import exporter_service_pb2 as es
from paddleray.exporter.v1 import model_pb2
from paddleray.services.common.identity import LOCAL
from paddleray.services.exporter.export.exports import ExportManager
from paddleray.services.exporter.export.sources import SchedulerJobs
from paddleray.services.exporter.settings import SchedulerPeer
from support.exporter import BUILDERS, linear_checkpoint

pytestmark = pytest.mark.unit


class StuckRunner:
    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = False

    async def run(self, request, runtime_env):
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        yield {}


async def test_exports_in_flight_end_failed_worker_lost_when_the_cluster_is_lost(store, tmp_path):
    runner = StuckRunner()
    manager = ExportManager(store, SchedulerJobs(SchedulerPeer(address="")), runner, tmp_path, [BUILDERS], "owner-1")
    checkpoint = linear_checkpoint(tmp_path)
    version = await manager.export(LOCAL, es.ExportModelRequest(parent="models/linear", checkpoint_uri=checkpoint,
                                                         model_builder=f"{BUILDERS}:build_linear"))
    await asyncio.wait_for(runner.started.wait(), 10)

    await manager.cluster_lost("the Ray cluster at 127.0.0.1:1 was lost (restarted)")
    record = await store.get_version("linear", 1)
    assert record.version.name == version.name
    assert record.version.state == model_pb2.MODEL_VERSION_STATE_FAILED
    assert record.version.failure.kind == common_pb2.FAILURE_KIND_WORKER_LOST
    assert "was lost (restarted)" in record.version.state_reason
    assert runner.cancelled and not manager._tasks
