"""Checkpoints of one run: atomic commit, manifest, keep-last-N and best-by-metric retention.

Layout under a run's directory (works unchanged on a shared filesystem)::

    checkpoints/step-000000040/            user files + paddleray_checkpoint.json (the manifest)
    checkpoints/.tmp-<uuid>/               a commit in progress (never listed)

A checkpoint is complete once its manifest exists in a `step-` directory. The manifest is
written into the `.tmp-` directory with the files, all of them fsynced, and one rename puts
the whole directory into place (its parent fsynced after), so a reader never sees a
half-written checkpoint as complete: a crash at any point leaves either a complete checkpoint
or an unlisted directory that the next commit removes, and a commit that returned survives a
power cut.

On an object store (a checkpoints directory named by a URI, s3://...) the same rule holds
without renames, which object stores do not have: the files are uploaded under
`step-000000040/` first and the manifest PUT last (one PUT is atomic), so a listing that
requires the manifest never shows a checkpoint whose upload was cut short; the next commit
deletes such a prefix. Deleting goes manifest first as on a disk.
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

from paddleray.services.common import files
from paddleray.services.common.storage import Storage, is_uri

MANIFEST = "paddleray_checkpoint.json"
_TMP_PREFIX = ".tmp-"
_NAME_PREFIX = "step-"


@dataclass(frozen=True)
class CheckpointInfo:
    """A complete checkpoint: its directory (a Path, or a URI on an object store) and what its
    manifest says."""

    path: Path | str
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
    """The checkpoint in `path` (a directory or a URI), or None when it is not complete (no
    readable manifest)."""
    directory: Path | str = os.fspath(path) if is_uri(path) else Path(path)
    try:
        if isinstance(directory, str):
            data = json.loads(Storage.for_root(directory).read_text(MANIFEST))
        else:
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


def checkpoint_store(directory: str | os.PathLike) -> CheckpointStore | ObjectCheckpointStore:
    """The store of a checkpoints directory: a path, or a URI of an object store."""
    return ObjectCheckpointStore(os.fspath(directory)) if is_uri(directory) else CheckpointStore(directory)


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
        final = self._free_name(step)
        info = CheckpointInfo(final, int(step), int(epoch), {k: float(v) for k, v in metrics.items()}, time.time())
        # The manifest goes in with the files (replacing one copied in from the source), all of
        # them durable before the rename that makes the directory a listed, complete checkpoint:
        # a manifest that survives a power cut never names files that did not. One rename is the
        # atomic step, so the files, the manifest and their directory are fsynced together, in
        # one round, rather than in four in turn (bench trainer: the commit was most of the
        # per-epoch overhead). Once commit returns, the checkpoint survives a power cut too, so
        # ctx.report need not wait for the trainer (it recovers an unreported checkpoint from disk).
        (tmp / MANIFEST).unlink(missing_ok=True)  # a copied-in one (or a link) is never written through
        (tmp / MANIFEST).write_text(json.dumps(info.manifest()))
        files.fsync_tree(tmp)
        os.rename(tmp, final)
        files.fsync_dir(self.directory)  # the rename into place
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
        return sorted(found, key=lambda i: (i.step, i.create_time, Path(i.path).name))

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
                self._delete(checkpoint)

    def _delete(self, checkpoint: CheckpointInfo) -> None:
        # Manifest first: a deletion cut short leaves an incomplete, unlisted directory.
        (Path(checkpoint.path) / MANIFEST).unlink(missing_ok=True)
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


class ObjectCheckpointStore(CheckpointStore):
    """The checkpoints of one run under an object-store URI (see the module's docstring)."""

    def __init__(self, directory: str) -> None:
        self.location = directory.rstrip("/")
        self.storage = Storage.for_root(self.location)

    def commit(self, source: str | os.PathLike, step: int, epoch: int, metrics: dict[str, float],
               policy: RetentionPolicy | None = None, move: bool = False) -> CheckpointInfo:
        """Uploads `source` as a checkpoint, manifest last; `move` removes the local copy after."""
        source = Path(source)
        if not source.is_dir():
            raise ValueError(f"checkpoint must be a directory, got {source}")
        self._remove_incomplete()
        name = self._free_object_name(step)
        (source / MANIFEST).unlink(missing_ok=True)  # a copied-in manifest must not complete it early
        self.storage.upload_dir(source, name)
        info = CheckpointInfo(self.storage.location(name), int(step), int(epoch),
                              {k: float(v) for k, v in metrics.items()}, time.time())
        self.storage.write_atomically(f"{name}/{MANIFEST}", json.dumps(info.manifest()).encode())
        if move:
            shutil.rmtree(source, ignore_errors=True)
        if policy is not None:
            self.apply_retention(policy)
        return info

    def list(self) -> list[CheckpointInfo]:
        found = []
        for name in self.storage.list_dir(""):
            if name.startswith(_NAME_PREFIX) and (info := read_checkpoint(self.storage.location(name))) is not None:
                found.append(info)
        return sorted(found, key=lambda i: (i.step, i.create_time, str(i.path)))

    def _delete(self, checkpoint: CheckpointInfo) -> None:
        name = self.storage.relative(str(checkpoint.path)) or ""
        if name:  # manifest first: a deletion cut short leaves an unlisted prefix
            self.storage.delete(f"{name}/{MANIFEST}")
            self.storage.delete(name)

    def _free_object_name(self, step: int) -> str:
        taken = set(self.storage.list_dir(""))
        base = candidate = f"{_NAME_PREFIX}{int(step):09d}"
        n = 1
        while candidate in taken:
            candidate, n = f"{base}-{n}", n + 1
        return candidate

    def _remove_incomplete(self) -> None:
        for name in self.storage.list_dir(""):
            if name.startswith(_NAME_PREFIX) and not self.storage.exists(f"{name}/{MANIFEST}"):
                self.storage.delete(name)

