"""CheckpointStore and TrainContext on a real directory: atomic commit, retention, resume."""

from __future__ import annotations

import threading
import time

import pytest

from paddleray.services.common.checkpoints import MANIFEST, CheckpointStore, RetentionPolicy, read_checkpoint
from paddleray.services.trainer.context import ContextSpec, RunPaths, TrainContext

pytestmark = pytest.mark.unit


def _write(directory, text="weights"):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "model.pdparams").write_text(text)
    return directory


def test_commit_writes_manifest_and_copies_unless_moved(tmp_path):
    store = CheckpointStore(tmp_path / "ckpt")
    source = _write(tmp_path / "user")
    info = store.commit(source, step=7, epoch=2, metrics={"loss": 0.5})
    assert source.exists(), "a copy leaves the user's directory alone"
    assert (info.path / "model.pdparams").read_text() == "weights"
    assert read_checkpoint(info.path).manifest() == info.manifest()
    assert (info.step, info.epoch, info.metrics) == (7, 2, {"loss": 0.5})
    moved = store.commit(_write(tmp_path / "staged"), step=8, epoch=3, metrics={}, move=True)
    assert not (tmp_path / "staged").exists()
    assert store.latest() == moved


def test_half_written_checkpoints_are_never_listed_and_are_cleaned(tmp_path):
    store = CheckpointStore(tmp_path / "ckpt")
    good = store.commit(_write(tmp_path / "a"), step=1, epoch=1, metrics={})
    # A crash between the rename and the manifest, and one during the copy.
    _write(tmp_path / "ckpt" / "step-000000099")
    _write(tmp_path / "ckpt" / ".tmp-deadbeef")
    assert store.latest() == good
    assert read_checkpoint(tmp_path / "ckpt" / "step-000000099") is None
    store.commit(_write(tmp_path / "b"), step=2, epoch=2, metrics={})
    assert not (tmp_path / "ckpt" / "step-000000099").exists()
    assert not (tmp_path / "ckpt" / ".tmp-deadbeef").exists()


def test_a_manifest_copied_from_the_source_does_not_complete_early(tmp_path):
    store = CheckpointStore(tmp_path / "ckpt")
    source = _write(tmp_path / "old")
    (source / MANIFEST).write_text('{"step": 999, "epoch": 999}')
    info = store.commit(source, step=3, epoch=1, metrics={})
    assert read_checkpoint(info.path).step == 3


def test_keep_last_and_best_by_metric(tmp_path):
    store = CheckpointStore(tmp_path / "ckpt")
    policy = RetentionPolicy(keep_last=2, best_metric="acc", best_mode="max", keep_best=1)
    for step, acc in [(1, 0.5), (2, 0.9), (3, 0.6), (4, 0.7), (5, 0.65)]:
        store.commit(_write(tmp_path / f"s{step}"), step=step, epoch=step, metrics={"acc": acc}, policy=policy)
    assert [c.step for c in store.list()] == [2, 4, 5]
    assert store.best(policy).step == 2
    low = RetentionPolicy(keep_last=1, best_metric="acc", best_mode="min")
    assert store.best(low).step == 5  # among what is left, min acc


def test_keep_last_zero_keeps_everything(tmp_path):
    store = CheckpointStore(tmp_path / "ckpt")
    for step in range(4):
        store.commit(_write(tmp_path / f"s{step}"), step=step, epoch=step, metrics={}, policy=RetentionPolicy())
    assert len(store.list()) == 4


def test_same_step_twice_gets_two_checkpoints(tmp_path):
    store = CheckpointStore(tmp_path / "ckpt")
    first = store.commit(_write(tmp_path / "a", "1"), step=5, epoch=1, metrics={})
    second = store.commit(_write(tmp_path / "b", "2"), step=5, epoch=1, metrics={})
    assert first.path != second.path
    assert (store.latest().path / "model.pdparams").read_text() == "2"


def _context(tmp_path, rank=0, resume_from=None, policy=None, background=False):
    reports = []
    spec = ContextSpec(
        run_name="runs/r1", paths=RunPaths.of(tmp_path, "r1"), rank=rank, world_size=2, local_rank=rank,
        config={"lr": 0.1}, resume_from=resume_from, retention=policy or RetentionPolicy(),
        commit_in_background=background,
    )
    return TrainContext(spec, reports.append, threading.Event()), reports


def _staged_checkpoint_with_slow_commit(ctx, monkeypatch, delay_s: float = 0.3):
    """A checkpoint directory handed out by ctx, whose commit takes delay_s longer than it would."""
    directory = ctx.make_checkpoint_dir()
    (directory / "w").write_text("x")
    commit = CheckpointStore.commit
    monkeypatch.setattr(CheckpointStore, "commit", lambda *a, **k: time.sleep(delay_s) or commit(*a, **k))
    return directory


def test_context_reports_a_checkpoint_once_it_is_durable(tmp_path, monkeypatch):
    ctx, reports = _context(tmp_path)
    directory = _staged_checkpoint_with_slow_commit(ctx, monkeypatch)
    started = time.monotonic()
    ctx.report({"epoch": 1}, checkpoint=directory)
    assert time.monotonic() - started >= 0.3, "by default report returns once the commit is done"
    assert reports[0].checkpoint is not None and (reports[0].checkpoint.path / MANIFEST).exists()


def test_context_commits_in_the_background_when_asked_and_keeps_report_order(tmp_path, monkeypatch):
    ctx, reports = _context(tmp_path, background=True)
    directory = _staged_checkpoint_with_slow_commit(ctx, monkeypatch)
    started = time.monotonic()
    ctx.report({"epoch": 1}, checkpoint=directory)
    ctx.report({"loss": 0.4})
    assert time.monotonic() - started < 0.3 and reports == [], "training goes on; nothing overtakes the commit"
    ctx.flush()
    assert [r.step for r in reports] == [1, 2] and reports[0].checkpoint.epoch == 1
    assert ctx.latest_checkpoint == reports[0].checkpoint.path


@pytest.mark.parametrize("background", [False, True])
def test_context_commits_rank0_checkpoints_and_counts_steps(tmp_path, background):
    ctx, reports = _context(tmp_path, background=background)
    ctx.report({"loss": 1.0})
    directory = ctx.make_checkpoint_dir()
    (directory / "w").write_text("x")
    ctx.report({"loss": 0.5, "epoch": 1}, checkpoint=directory)
    ctx.report({"loss": 0.4})
    ctx.flush()
    assert [r.step for r in reports] == [1, 2, 3]
    assert reports[1].checkpoint.epoch == 1
    assert not directory.exists(), "a staged directory is moved, not copied"
    assert ctx.latest_checkpoint == reports[1].checkpoint.path
    assert ctx.checkpoint_manifest["step"] == 2
    ctx.report({"step": 40, "loss": 0.1})
    assert reports[-1].step == 40


def test_context_copies_a_directory_it_did_not_hand_out_before_report_returns(tmp_path):
    ctx, reports = _context(tmp_path, background=True)
    mine = tmp_path / "my-checkpoint"
    mine.mkdir()
    (mine / "w").write_text("epoch 1")
    ctx.report({"epoch": 1}, checkpoint=mine)
    assert reports[-1].checkpoint is not None, "committed before report returned: the owner may reuse it"
    (mine / "w").write_text("epoch 2")
    assert (reports[-1].checkpoint.path / "w").read_text() == "epoch 1"


def test_context_raises_a_failed_background_commit_at_the_next_report(tmp_path):
    ctx, reports = _context(tmp_path, background=True)
    directory = ctx.make_checkpoint_dir()
    directory.rmdir()  # gone before the committer gets to it
    ctx.report({"epoch": 1}, checkpoint=directory)
    with pytest.raises(RuntimeError, match="checkpoint commit failed: checkpoint must be a directory"):
        ctx.flush()
    with pytest.raises(RuntimeError, match="checkpoint commit failed"):
        ctx.report({"epoch": 2})
    assert reports == []


def test_context_other_ranks_do_not_commit(tmp_path):
    ctx, reports = _context(tmp_path, rank=1)
    directory = ctx.make_checkpoint_dir()
    ctx.report({"epoch": 1}, checkpoint=directory)
    assert reports[0].checkpoint is None
    assert ctx.latest_checkpoint is None
    assert ctx.shard(list(range(6))) == [1, 3, 5]


def test_context_resumes_from_checkpoint_step(tmp_path):
    other = CheckpointStore(tmp_path / "elsewhere")
    previous = other.commit(_write(tmp_path / "p"), step=12, epoch=4, metrics={"loss": 0.2})
    ctx, reports = _context(tmp_path, resume_from=str(previous.path))
    assert ctx.latest_checkpoint == previous.path
    assert ctx.checkpoint_manifest["epoch"] == 4
    ctx.report({"epoch": 5})
    assert reports[0].step == 13


def test_context_rejects_non_numeric_metrics(tmp_path):
    ctx, _ = _context(tmp_path)
    with pytest.raises(TypeError, match="'name'"):
        ctx.report({"name": "abc"})
    with pytest.raises(KeyError, match="no dataset named 'train'"):
        ctx.get_dataset_shard("train")


@pytest.mark.parametrize("manifest", ['{"epoch": 1}', "[1, 2]", '{"step": 1, "epoch": 1, "metrics": [1]}', '{"step": "x", "epoch": 1}'])
def test_a_foreign_manifest_is_no_checkpoint(tmp_path, manifest):
    store = CheckpointStore(tmp_path / "ckpts")
    good = store.commit(_write(tmp_path / "src"), step=1, epoch=1, metrics={})
    bad = tmp_path / "ckpts" / "step-000000002"
    bad.mkdir()
    (bad / MANIFEST).write_text(manifest)
    assert read_checkpoint(bad) is None
    assert [c.path for c in store.list()] == [good.path]
