"""Checkpoints of one run: atomic commit, manifest, keep-last-N and best-by-metric retention.

Layout under a run's directory (works unchanged on a shared filesystem)::

    checkpoints/step-000000040/            user files + paddleray_checkpoint.json (the manifest)
    checkpoints/.tmp-<uuid>/               a commit in progress (never listed)

A checkpoint is complete once its manifest exists. The directory is renamed into place first
and the manifest written last (itself through a rename), so a reader never sees a half-written
checkpoint as complete: a crash at any point leaves either a complete checkpoint or an
unlisted directory that the next commit removes. The files are fsynced before the manifest
is written, and the directory entries after, so a commit that returned survives a power cut.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

MANIFEST = "paddleray_checkpoint.json"
_TMP_PREFIX = ".tmp-"
_NAME_PREFIX = "step-"


@dataclass(frozen=True)
class CheckpointInfo:
    """A complete checkpoint: its directory and what its manifest says."""

    path: Path
    step: int
    epoch: int
    metrics: dict[str, float] = field(default_factory=dict)
    create_time: float = 0.0

    def manifest(self) -> dict[str, Any]:
        return {"step": self.step, "epoch": self.epoch, "metrics": dict(self.metrics), "create_time": self.create_time}


@dataclass(frozen=True)
class RetentionPolicy:
    """keep_last=0 keeps every checkpoint; with best_metric set, the best one is always kept."""

    keep_last: int = 0
    best_metric: str = ""
    best_mode: Literal["min", "max"] = "max"
    keep_best: int = 0

    def rank_key(self, info: CheckpointInfo) -> float:
        """Smaller is better; checkpoints without the metric rank last."""
        value = info.metrics.get(self.best_metric)
        if value is None:
            return float("inf")
        return value if self.best_mode == "min" else -value


def read_checkpoint(path: str | os.PathLike) -> CheckpointInfo | None:
    """The checkpoint in `path`, or None when it is not complete (no readable manifest)."""
    directory = Path(path)
    try:
        data = json.loads((directory / MANIFEST).read_text())
        return CheckpointInfo(
            path=directory,
            step=int(data["step"]),
            epoch=int(data["epoch"]),
            metrics={k: float(v) for k, v in data.get("metrics", {}).items()},
            create_time=float(data.get("create_time", 0.0)),
        )
    # A manifest that is not ours (or was edited) makes the directory no checkpoint, rather
    # than an error in StartRun's validation or in every listing of the run's checkpoints.
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


class CheckpointStore:
    """The checkpoints directory of one run. Only one writer (rank 0 of the run) commits."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)

    def commit(
        self,
        source: str | os.PathLike,
        step: int,
        epoch: int,
        metrics: dict[str, float],
        policy: RetentionPolicy | None = None,
        move: bool = False,
    ) -> CheckpointInfo:
        """Makes `source` a complete checkpoint, then applies the retention policy.

        `move` renames source into place (cheap, for directories the trainer handed out under
        the same storage root); otherwise the files are copied and source is left as it was.
        """
        source = Path(source)
        if not source.is_dir():
            raise ValueError(f"checkpoint must be a directory, got {source}")
        self.directory.mkdir(parents=True, exist_ok=True)
        self._remove_incomplete()
        tmp = self.directory / f"{_TMP_PREFIX}{uuid.uuid4().hex}"
        if move:
            try:
                os.rename(source, tmp)
            except OSError:  # another filesystem: fall back to a copy
                shutil.copytree(source, tmp)
                shutil.rmtree(source, ignore_errors=True)
        else:
            shutil.copytree(source, tmp)
        (tmp / MANIFEST).unlink(missing_ok=True)  # a copied-in manifest must not complete it early
        # Durable before the manifest exists: a manifest that survives a power cut never names
        # files that did not. Once commit returns, the checkpoint survives one too, so ctx.report
        # need not wait for the trainer (it recovers an unreported checkpoint from disk).
        _fsync_tree(tmp)
        final = self._free_name(step)
        os.rename(tmp, final)
        info = CheckpointInfo(final, int(step), int(epoch), {k: float(v) for k, v in metrics.items()}, time.time())
        _write_atomically(final / MANIFEST, json.dumps(info.manifest()))
        _fsync_dir(self.directory)  # the rename into place
        if policy is not None:
            self.apply_retention(policy)
        return info

    def list(self) -> list[CheckpointInfo]:
        """Complete checkpoints, oldest first."""
        if not self.directory.is_dir():
            return []
        found = []
        for child in self.directory.iterdir():
            if child.name.startswith(_NAME_PREFIX) and (info := read_checkpoint(child)) is not None:
                found.append(info)
        return sorted(found, key=lambda i: (i.step, i.create_time, i.path.name))

    def latest(self) -> CheckpointInfo | None:
        checkpoints = self.list()
        return checkpoints[-1] if checkpoints else None

    def best(self, policy: RetentionPolicy) -> CheckpointInfo | None:
        if not policy.best_metric:
            return None
        ranked = [c for c in self.list() if policy.best_metric in c.metrics]
        return min(ranked, key=policy.rank_key) if ranked else None

    def apply_retention(self, policy: RetentionPolicy) -> None:
        if policy.keep_last <= 0:  # keeps everything: no need to read every manifest again
            return
        checkpoints = self.list()
        if not checkpoints:
            return
        keep = {c.path for c in checkpoints[-policy.keep_last :]}
        if policy.best_metric:
            ranked = sorted((c for c in checkpoints if policy.best_metric in c.metrics), key=policy.rank_key)
            keep |= {c.path for c in ranked[: max(1, policy.keep_best)]}
        for checkpoint in checkpoints:
            if checkpoint.path not in keep:
                # Manifest first: a deletion cut short leaves an incomplete, unlisted directory.
                (checkpoint.path / MANIFEST).unlink(missing_ok=True)
                shutil.rmtree(checkpoint.path, ignore_errors=True)

    def _free_name(self, step: int) -> Path:
        base = self.directory / f"{_NAME_PREFIX}{int(step):09d}"
        candidate, n = base, 1
        while candidate.exists():
            candidate = base.with_name(f"{base.name}-{n}")
            n += 1
        return candidate

    def _remove_incomplete(self) -> None:
        for child in self.directory.iterdir():
            if child.name.startswith(_TMP_PREFIX) or (
                child.name.startswith(_NAME_PREFIX) and not (child / MANIFEST).exists()
            ):
                shutil.rmtree(child, ignore_errors=True)


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_tree(directory: Path) -> None:
    """fsync every file and directory under `directory` (a user's checkpoint: few files)."""
    for parent, _dirs, files in os.walk(directory):
        for name in files:
            fd = os.open(os.path.join(parent, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(parent))


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
