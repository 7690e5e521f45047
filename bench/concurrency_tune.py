"""The Ray Tune side of `python -m bench concurrency`, as its own driver process.

python -m bench.concurrency_tune ADDRESS PARAMS_JSON runs `trials` trials of the same
function (bench/concurrency_entry.py:hold) on the same cluster with the same resources
(`num_cpus` per trial), all at once, releases them once every trial has reported (as the
paddleray side does), and prints one JSON line: tuner.fit()'s wall time, the time until every
trial had reported, and the trials that ended without error.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path


class _TuneContext:
    def report(self, metrics: dict) -> None:
        from ray import tune

        tune.report(dict(metrics))


def trial(config: dict) -> None:
    from bench.concurrency_entry import hold

    hold(config, _TuneContext())


def main(address: str, params: dict) -> dict:
    import ray
    from ray import tune
    from ray.tune import Callback

    expected, release = int(params["trials"]), Path(params["release"])
    live: dict[str, float] = {}
    started = time.perf_counter()

    class ReleaseWhenAllReported(Callback):
        def on_trial_result(self, iteration, trials, trial, result, **info):
            live.setdefault(trial.trial_id, time.perf_counter() - started)
            if len(live) == expected and not release.exists():
                release.touch()

    ray.init(address=address, log_to_driver=False)
    with tempfile.TemporaryDirectory() as storage:
        tuner = tune.Tuner(
            tune.with_resources(trial, {"cpu": float(params["num_cpus"])}),
            param_space={"release": str(release), "report_s": params["report_s"], "seed": tune.grid_search(list(range(expected)))},
            tune_config=tune.TuneConfig(max_concurrent_trials=expected),
            run_config=tune.RunConfig(storage_path=storage, verbose=0, callbacks=[ReleaseWhenAllReported()]),
        )
        started = time.perf_counter()
        results = tuner.fit()
        wall_s = time.perf_counter() - started
    ray.shutdown()
    return {"wall_s": wall_s, "all_reported_s": max(live.values(), default=None),
            "trials": len(results) - len(results.errors), "errors": len(results.errors)}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], json.loads(sys.argv[2]))), flush=True)
