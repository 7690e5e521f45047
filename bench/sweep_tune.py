"""The Ray Tune baseline of the sweep benchmark, run as its own driver process.

python -m bench.sweep_tune ADDRESS PARAMS_JSON prints one JSON line: the wall time of
tuner.fit() and the best accuracy. The trial function is the same paddleray example the sweep
runs (digits_mlp.train), called with a context that forwards reports and checkpoints to Tune,
the way a Tune user would wrap an existing training function.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path


class TuneContext:
    """What digits_mlp.train needs of its ctx, on one rank, backed by Tune."""

    rank = local_rank = 0
    world_size = 1
    device = "cpu"
    latest_checkpoint = None
    init_checkpoint = None
    dataset_names: list[str] = []

    def __init__(self) -> None:
        self._scratch = Path(tempfile.mkdtemp(prefix="tune-ckpt-"))
        self._count = 0

    def make_checkpoint_dir(self) -> Path:
        self._count += 1
        path = self._scratch / f"{self._count:04d}"
        path.mkdir()
        return path

    def report(self, metrics: dict, checkpoint=None) -> None:
        from ray import tune

        tune.report(dict(metrics), checkpoint=tune.Checkpoint.from_directory(str(checkpoint)) if checkpoint else None)

    def should_stop(self) -> bool:
        return False

    def shard(self, seq):
        return seq

    def get_dataset_shard(self, name: str):
        # As paddleray's context does for a run given no dataset of that name: the example then
        # trains on its in-memory digits. A Tune function trainable is given no Ray datasets.
        raise KeyError(f"no dataset named {name!r} in this Tune trial")


def trial(config: dict) -> None:
    from paddleray.services.trainer.examples import digits_mlp

    digits_mlp.train(dict(config), TuneContext())


def main(address: str, params: dict) -> dict:
    import ray
    from ray import tune

    ray.init(address=address, log_to_driver=False)
    space = dict(params["config"])
    space["lr"] = tune.grid_search(params["lrs"])
    with tempfile.TemporaryDirectory() as storage:
        tuner = tune.Tuner(
            tune.with_resources(trial, {"cpu": 1}),
            param_space=space,
            tune_config=tune.TuneConfig(max_concurrent_trials=params["slots"], metric="accuracy", mode="max"),
            run_config=tune.RunConfig(storage_path=storage, verbose=0),
        )
        started = time.perf_counter()
        results = tuner.fit()
        wall_s = time.perf_counter() - started
    best = results.get_best_result()
    ray.shutdown()
    return {
        "wall_s": wall_s, "best_accuracy": best.metrics["accuracy"], "errors": len(results.errors),
        "trials": len(results) - len(results.errors),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], json.loads(sys.argv[2]))), flush=True)
