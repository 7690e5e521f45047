"""RunExecutor's handling of rank reports, without Ray: metrics, checkpoints, best checkpoint."""

from __future__ import annotations

import pytest

from paddleray.common.v1 import common_pb2
from paddleray.services.common.checkpoints import CheckpointInfo, RetentionPolicy
from paddleray.services.trainer import runs
from paddleray.services.trainer.context import Report
from paddleray.services.trainer.executor import RunExecutor
from paddleray.services.trainer.pool import WorkerPool
from paddleray.services.trainer.records import MetricsReport
from paddleray.services.trainer.spec import GroupSpec, RunSpec

pytestmark = pytest.mark.unit


def test_the_best_checkpoint_comes_from_the_reports_without_rereading_the_store(tmp_path):
    registry = runs.RunRegistry(tmp_path)
    registry.add(runs.RunRecord(run_id="r1", spec=common_pb2.TrainingSpec(entrypoint="m:f")))
    policy = RetentionPolicy(best_metric="loss", best_mode="min")
    spec = RunSpec(entrypoint="m:f", config={}, group=GroupSpec(), retention=policy)
    executor = RunExecutor("r1", spec, registry, WorkerPool(), tmp_path)

    def report(step, **values):
        # The directories are not on disk: nothing may list or read the checkpoints again.
        info = CheckpointInfo(tmp_path / f"step-{step}", step, step, values, float(step))
        executor._on_report(Report(0, step, values, info))
        return info.path

    first = report(1, loss=0.5)
    assert registry.get("r1").best_checkpoint.path == first
    report(2, loss=0.7)
    report(3)  # without the metric: never the best
    assert registry.get("r1").best_checkpoint.path == first
    third = report(4, loss=0.1)
    report(5, loss=0.1)  # a tie keeps the earlier one
    record = registry.get("r1")
    assert record.best_checkpoint.path == third
    assert record.latest_checkpoint.path == tmp_path / "step-5"


def test_no_best_checkpoint_without_a_best_metric(tmp_path):
    registry = runs.RunRegistry(tmp_path)
    registry.add(runs.RunRecord(run_id="r1", spec=common_pb2.TrainingSpec(entrypoint="m:f")))
    spec = RunSpec(entrypoint="m:f", config={}, group=GroupSpec(), retention=RetentionPolicy())
    executor = RunExecutor("r1", spec, registry, WorkerPool(), tmp_path)
    info = CheckpointInfo(tmp_path / "step-1", 1, 1, {"loss": 0.5}, 1.0)
    executor._on_report(Report(0, 1, {"loss": 0.5}, info))
    executor._on_report(Report(1, 1, {"loss": 0.4}, None))  # other ranks' reports are not the run's
    record = registry.get("r1")
    assert record.best_checkpoint is None and record.latest_metrics == MetricsReport(1, {"loss": 0.5})
