"""WorkerActor as a plain object (no Ray): user code in its thread, reports long-polled."""

from __future__ import annotations

import time

import pytest

from paddleray.services.common.checkpoints import MANIFEST
from paddleray.services.trainer import worker
from paddleray.services.trainer.context import ContextSpec, RunPaths

pytestmark = pytest.mark.unit

ENTRY = """
def main(config, ctx):
    for i in range(config["n"]):
        ctx.report({"i": i})
"""


def test_a_rank_reporting_faster_than_the_trainer_polls_waits_instead_of_queueing_without_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(worker, "_MAX_QUEUED_REPORTS", 50)
    (tmp_path / "fast_reporter.py").write_text(ENTRY)
    monkeypatch.syspath_prepend(str(tmp_path))
    actor = worker.WorkerActor()
    spec = ContextSpec(run_name="runs/r", paths=RunPaths(tmp_path / "run"), rank=0, world_size=1, local_rank=0, config={"n": 500})
    actor.start("fast_reporter:main", spec)
    deadline = time.monotonic() + 30
    while actor._reports.qsize() < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    assert actor._reports.qsize() == 50 and actor._thread.is_alive(), "the rank waits for the trainer"
    reports, outcome, polls = [], None, 0
    while outcome is None and polls < 100:
        poll = actor.next_reports(5.0)
        assert len(poll.reports) <= 50
        reports += poll.reports
        outcome, polls = poll.outcome, polls + 1
    assert outcome is not None and outcome.ok
    assert [int(r.metrics["i"]) for r in reports] == list(range(500))


CHECKPOINTING = """
def main(config, ctx):
    for epoch in range(1, 4):
        directory = ctx.make_checkpoint_dir()
        (directory / "w").write_text(str(epoch))
        ctx.report({"epoch": epoch}, checkpoint=directory)
    if config.get("fail"):
        raise ValueError("diverged")
"""


def _run_to_end(actor) -> tuple[list, object]:
    reports, outcome = [], None
    deadline = time.monotonic() + 30
    while outcome is None and time.monotonic() < deadline:
        poll = actor.next_reports(1.0)
        reports += poll.reports
        outcome = poll.outcome
    return reports, outcome


@pytest.mark.parametrize("fail", [False, True])
def test_every_checkpoint_reported_is_committed_and_handed_over_before_the_outcome(tmp_path, monkeypatch, fail):
    (tmp_path / "checkpointing.py").write_text(CHECKPOINTING)
    monkeypatch.syspath_prepend(str(tmp_path))
    actor = worker.WorkerActor()
    paths = RunPaths(tmp_path / "run")
    spec = ContextSpec(
        run_name="runs/r", paths=paths, rank=0, world_size=1, local_rank=0, config={"fail": fail},
        commit_in_background=True,
    )
    actor.start("checkpointing:main", spec)
    reports, outcome = _run_to_end(actor)
    assert outcome is not None and outcome.ok is not fail
    if fail:
        assert "ValueError: diverged" in outcome.error, "the function's error stays the cause"
    assert [r.checkpoint.epoch for r in reports] == [1, 2, 3]
    assert [(r.checkpoint.path / "w").read_text() for r in reports] == ["1", "2", "3"]
    assert all((r.checkpoint.path / MANIFEST).exists() for r in reports)
