"""TrainContext: what user code gets as `ctx` on every rank, `function(config, ctx)`.

It lives in the worker actor. Reports go to a sink (the executor's queue, drained by the
trainer); checkpoints are committed here, on rank 0, straight into the shared storage root,
so the files never travel through the driver. By default ctx.report returns once the
checkpoint is durable; with the policy's commit_in_background, a checkpoint saved in
make_checkpoint_dir() is committed by a background thread (committer.py) while training
goes on, its report reaches the sink once the commit is durable, and reports keep their order.
"""

from __future__ import annotations

import math
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from paddleray.services.common.checkpoints import CheckpointInfo, RetentionPolicy, checkpoint_store, read_checkpoint
from paddleray.services.common.storage import cache_dir, is_uri, local_copy
from paddleray.services.trainer.committer import BackgroundCommitter


@dataclass(frozen=True)
class Report:
    """One ctx.report() call as the trainer receives it."""

    rank: int
    step: int
    metrics: dict[str, float]
    checkpoint: CheckpointInfo | None = None


@dataclass(frozen=True)
class RunPaths:
    """Where one run keeps its files under the storage root: a directory, or a URI
    (s3://bucket/prefix/runs/<run>) whose checkpoints and logs are uploaded from a local copy
    on each worker's node (storage.cache_dir), as Ray Train stages files for its storage."""

    root: Path | str
    STAGING: ClassVar[str] = "staging"

    @classmethod
    def of(cls, storage_root: str | os.PathLike, run_id: str) -> RunPaths:
        if is_uri(storage_root):
            return cls(f"{os.fspath(storage_root).rstrip('/')}/runs/{run_id}")
        return cls(Path(storage_root) / "runs" / run_id)

    @property
    def remote(self) -> bool:
        return isinstance(self.root, str)

    def _under(self, name: str) -> Path | str:
        return f"{self.root}/{name}" if isinstance(self.root, str) else self.root / name

    def _local(self, name: str) -> Path:
        """On a remote root, this node's local directory for the run's `name` (made on use)."""
        if isinstance(self.root, str):
            return cache_dir("runs", self.root.rsplit("/", 1)[-1], name)
        return self.root / name

    @property
    def checkpoints(self) -> Path | str:
        return self._under("checkpoints")

    @property
    def staging(self) -> Path:
        """Where make_checkpoint_dir hands out directories: on the root when it is a directory
        (a commit is then a rename), on this node otherwise (a commit is then an upload)."""
        return self._local(self.STAGING)

    @property
    def logs(self) -> Path | str:
        """Where the rank's log files are read from (GetRunLogs)."""
        return self._under("logs")

    @property
    def local_logs(self) -> Path:
        """Where a rank writes its log files on its node (uploaded to `logs` on a remote root)."""
        return self._local("logs")


@dataclass
class ContextSpec:
    """Everything a rank needs to build its TrainContext (sent to the actor, so picklable)."""

    run_name: str
    paths: RunPaths
    rank: int
    world_size: int
    local_rank: int
    config: dict[str, Any]
    device: str = "cpu"
    resume_from: str | None = None
    init_from: str | None = None
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    commit_in_background: bool = False
    dataset_shards: dict[str, Any] = field(default_factory=dict)


class TrainContext:
    def __init__(self, spec: ContextSpec, sink: Callable[[Report], None], stop: threading.Event) -> None:
        self._spec = spec
        self._sink = sink
        self._stop = stop
        self._store = checkpoint_store(spec.paths.checkpoints)
        self._committer: BackgroundCommitter[Report] = BackgroundCommitter(sink)
        resumed = self._resume_checkpoint()
        # The step counter continues from the checkpoint a run resumes from.
        self._step = resumed.step if resumed is not None else 0
        self._epoch = resumed.epoch if resumed is not None else 0

    @property
    def rank(self) -> int:
        return self._spec.rank

    @property
    def world_size(self) -> int:
        return self._spec.world_size

    @property
    def local_rank(self) -> int:
        return self._spec.local_rank

    @property
    def config(self) -> dict[str, Any]:
        return self._spec.config

    @property
    def run_name(self) -> str:
        return self._spec.run_name

    @property
    def device(self) -> str:
        return self._spec.device

    def should_stop(self) -> bool:
        """True once a stop was asked (StopRun, timeout, early stopping): return soon after."""
        return self._stop.is_set()

    def report(self, metrics: Mapping[str, Any], checkpoint: str | os.PathLike | None = None) -> None:
        """Reports metrics; on rank 0 a checkpoint directory is committed atomically.

        Returns once the checkpoint is durable, unless the run commits in the background: then
        a directory from make_checkpoint_dir() (the trainer's from now on) is committed while
        the caller goes on. Any other directory is always copied before report returns, since
        its owner may write to it again. Other ranks' checkpoints are dropped: in data
        parallelism every rank holds the same model, and one writer keeps commits free of races.
        """
        values = _as_floats(metrics)
        step = self._step = int(values["step"]) if "step" in values else self._step + 1
        if "epoch" in values:
            self._epoch = int(values["epoch"])
        epoch = self._epoch
        if checkpoint is None:
            self._committer.hand_over(Report(self.rank, step, values))
            return
        source = Path(checkpoint)
        ours = _is_within(source, self._spec.paths.staging)
        if self.rank != 0:
            if ours:
                shutil.rmtree(source, ignore_errors=True)
            self._committer.hand_over(Report(self.rank, step, values))
            return

        def commit() -> Report:
            info = self._store.commit(source, step, epoch, values, self._spec.retention, move=ours)
            return Report(self.rank, step, values, info)

        if ours and self._spec.commit_in_background:
            self._committer.submit(commit)
        else:
            self._committer.flush()
            self._sink(commit())

    def flush(self) -> None:
        """Waits for the checkpoints reported so far to be committed and handed to the trainer."""
        self._committer.flush()

    def close(self) -> None:
        """Called by the worker when the user function has ended: commits what is in flight."""
        self._committer.close()

    def make_checkpoint_dir(self) -> Path:
        """A fresh empty directory on the storage root to save into before report(checkpoint=...)."""
        path = self._spec.paths.staging / f"rank-{self.rank}-{uuid.uuid4().hex[:12]}"
        path.mkdir(parents=True)
        return path

    @property
    def latest_checkpoint(self) -> Path | None:
        """This run's newest complete checkpoint, else the one the run resumes from: a local
        directory (a checkpoint on an object store is downloaded to this node's cache first)."""
        info = self._latest_info()
        return local_copy(info.path) if info is not None else None

    @property
    def init_checkpoint(self) -> Path | None:
        """The weights the job starts from (spec.init_from): another job's checkpoint or an
        exported model version's directory; None when not set. The same on every attempt: on a
        retry, latest_checkpoint (the job's own progress) is what to resume from."""
        return local_copy(self._spec.init_from) if self._spec.init_from else None

    @property
    def checkpoint_manifest(self) -> dict[str, Any] | None:
        info = self._latest_info()
        return info.manifest() if info is not None else None

    def get_dataset_shard(self, name: str) -> Any:
        """This rank's shard of a dataset of the run's spec, as a Ray Data DataIterator."""
        try:
            return self._spec.dataset_shards[name]
        except KeyError:
            known = ", ".join(sorted(self._spec.dataset_shards)) or "none"
            raise KeyError(f"no dataset named {name!r} in this run (datasets: {known})") from None

    def shard(self, seq: Sequence[Any]) -> Sequence[Any]:
        """This rank's slice (rank::world_size) of an in-memory array or sequence."""
        return seq[self.rank :: self.world_size]

    def _latest_info(self) -> CheckpointInfo | None:
        self._committer.flush()  # a checkpoint reported is one the caller may ask for at once
        return self._store.latest() or self._resume_checkpoint()

    def _resume_checkpoint(self) -> CheckpointInfo | None:
        return read_checkpoint(self._spec.resume_from) if self._spec.resume_from else None


def _as_floats(metrics: Mapping[str, Any]) -> dict[str, float]:
    values = {}
    for key, value in metrics.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"ctx.report: metric {key!r} must be a number, got {type(value).__name__}") from None
        if not math.isfinite(number) and key in ("step", "epoch"):
            raise ValueError(f"ctx.report: metric {key!r} must be finite, got {number}")
        values[str(key)] = number
    return values


def _is_within(path: Path, parent: Path) -> bool:
    try:
        path.resolve().relative_to(parent.resolve())
    except ValueError:
        return False
    return True
