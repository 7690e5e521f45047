"""A stand-in for the trainer's TrainContext over a tmp dir: a test double of the user-code contract.

Implements exactly what the contract promises user code (rank, world size, report with a
checkpoint directory, make_checkpoint_dir, latest_checkpoint, init_checkpoint, should_stop,
shard, get_dataset_shard), so the examples can be tested without the trainer.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path


class StandInContext:
    def __init__(self, root: Path, config: dict, rank: int = 0, world_size: int = 1,
                 latest_checkpoint: Path | None = None, stop_after_calls: int | None = None,
                 datasets: dict | None = None, init_checkpoint: Path | None = None) -> None:
        self.root = Path(root)
        self.config = config
        self.rank, self.local_rank, self.world_size = rank, rank, world_size
        self.run_name = "runs/test"
        self.device = "cpu"
        self.latest_checkpoint = latest_checkpoint
        self.init_checkpoint = init_checkpoint
        self.reports: list[dict] = []
        self.checkpoints: list[Path] = []
        self.stop_checks = 0
        self._stop_after = stop_after_calls
        self._datasets = datasets or {}
        self._counter = itertools.count()

    def make_checkpoint_dir(self) -> Path:
        path = self.root / "scratch" / f"{next(self._counter):04d}"
        path.mkdir(parents=True)
        return path

    def report(self, metrics: dict, checkpoint=None) -> None:
        self.reports.append(dict(metrics))
        if checkpoint is not None:
            # The real trainer commits the directory atomically; a copy is enough here.
            committed = self.root / "checkpoints" / f"epoch-{int(metrics['epoch']):03d}"
            shutil.copytree(checkpoint, committed)
            self.checkpoints.append(committed)

    def should_stop(self) -> bool:
        self.stop_checks += 1
        return self._stop_after is not None and self.stop_checks > self._stop_after

    def shard(self, seq):
        return seq[self.rank::self.world_size]

    def get_dataset_shard(self, name: str):
        return self._datasets[name]
