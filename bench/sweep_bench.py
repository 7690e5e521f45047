"""python -m bench sweep: an 8-trial sweep with 2 slots, paddleray vs Ray Tune; ASHA's compute.

sweep_vs_tune: wall time of the same 8 trials of the digits MLP (one CPU each, two at once)
from CreateExperiment to the experiment's end on a warm local stack, against tuner.fit() of
Ray Tune running the same training function with the same resources on a 2-CPU Ray head of
its own (the stack's warm workers hold its CPUs), alternated A B A B, medians.

asha_compute_fraction: epochs trained by the same sweep with ASHA against without, both on
paddleray, with the best accuracies reported next to it (the target holds only when they
agree within one point: its precondition).

The smoke run sweeps 2 trials of 2 epochs once, without the warm-up sweeps.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from bench import harness
from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import experiment_pb2, experiment_service_pb2_grpc, job_pb2, job_service_pb2_grpc
from paddleray.scheduler.v1 import experiment_service_pb2 as es
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.services.localstack import stack
from paddleray.services.localstack.ray_head import AUTH_ENV, RayHead

ENTRYPOINT = "paddleray.services.trainer.examples.digits_mlp:train"
E = experiment_pb2.ExperimentState
REPO = Path(__file__).resolve().parent.parent
TARGETS = {"sweep_vs_tune": "<= 0.15", "asha_compute_fraction": "<= 0.6"}


def _lrs(count: int, seed: int) -> list[float]:
    """Adam learning rates drawn log-uniformly from [1e-4, 1): some far too small or too large."""
    rng = random.Random(seed)
    return [round(math.exp(rng.uniform(math.log(1e-4), math.log(1.0))), 6) for _ in range(count)]


def _experiment(lrs: list[float], config: dict, slots: int, asha: bool) -> experiment_pb2.Experiment:
    exp = experiment_pb2.Experiment(metric="accuracy", mode=common_pb2.METRIC_MODE_MAX, max_concurrent_trials=slots)
    template = exp.trial_template
    template.spec.entrypoint = ENTRYPOINT
    template.spec.resources_per_worker.num_cpus = 1
    template.spec.config.update(config)
    for lr in lrs:
        exp.search_space.parameters["lr"].grid.values.add().number_value = lr
    if asha:
        # Ray Tune's ASHA defaults (grace period 1, reduction factor 4); max_t past the last epoch
        # so that no trial is stopped for finishing.
        exp.early_stopping.asha.CopyFrom(experiment_pb2.AshaPolicy(
            time_attr="epoch", grace_period=1, max_t=config["epochs"] + 1
        ))
    return exp


class Paddleray:
    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address)
        self.experiments = experiment_service_pb2_grpc.ExperimentServiceStub(self.channel)
        self.jobs = job_service_pb2_grpc.JobServiceStub(self.channel)

    def sweep(self, exp: experiment_pb2.Experiment) -> dict:
        started = time.perf_counter()
        name = self.experiments.CreateExperiment(es.CreateExperimentRequest(experiment=exp)).experiment.name
        while True:
            done = self.experiments.GetExperiment(es.GetExperimentRequest(name=name)).experiment
            if done.state != E.EXPERIMENT_STATE_RUNNING:
                break
            time.sleep(0.02)
        wall_s = time.perf_counter() - started
        trials = self.jobs.ListJobs(js.ListJobsRequest(experiment=name, page_size=1000)).jobs
        if done.state != E.EXPERIMENT_STATE_SUCCEEDED:
            raise RuntimeError(f"{name} ended {E.Name(done.state)}: {[t.state_reason for t in trials]}")
        return {
            "wall_s": wall_s,
            "best_accuracy": done.best_trial.metric_value,
            "epochs": sum(int(t.latest_metrics.metrics.get("epoch", 0)) for t in trials),
            "early_stopped": sum(t.state == job_pb2.JOB_STATE_EARLY_STOPPED for t in trials),
            "trials": sum(t.state in (job_pb2.JOB_STATE_SUCCEEDED, job_pb2.JOB_STATE_EARLY_STOPPED) for t in trials),
        }


def _tune(address: str, lrs: list[float], config: dict, slots: int) -> dict:
    params = json.dumps({"lrs": lrs, "config": config, "slots": slots})
    out = subprocess.run(
        [sys.executable, "-m", "bench.sweep_tune", address, params], cwd=REPO, capture_output=True, text=True,
        check=True, env={**os.environ, **AUTH_ENV, "GLOG_v": "0", "GLOG_minloglevel": "2"},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick: bool, smoke: bool = False) -> dict:
    rounds = 1 if quick or smoke else 3
    trials, slots = (2, 2) if smoke else (8, 2)
    config: dict[str, Any] = {"epochs": 2 if smoke else 8, "batch_size": 64, "optimizer": "adam", "hidden_sizes": [64]}
    lrs = _lrs(8, seed=3)[:trials]
    with tempfile.TemporaryDirectory(prefix="sweep-bench-") as tmp:
        state = stack.up(state_dir=Path(tmp) / "stack", num_cpus=2)
        tune_head = RayHead(num_cpus=2, log_file=Path(tmp) / "tune-ray.log").start()
        try:
            paddleray = Paddleray(state.address("scheduler"))
            if not smoke:
                # One unmeasured sweep each: warm workers for paddleray, imports and worker
                # processes for Tune, so that both are measured warm.
                paddleray.sweep(_experiment(lrs[:2], config, slots, asha=False))
                _tune(tune_head.address, lrs[:2], config, slots)
            ours, theirs = harness.alternate(
                lambda: paddleray.sweep(_experiment(lrs, config, slots, asha=False)),
                lambda: _tune(tune_head.address, lrs, config, slots),
                rounds,
            )
            with_asha = [paddleray.sweep(_experiment(lrs, config, slots, asha=True)) for _ in range(rounds)]
        finally:
            tune_head.stop()
            stack.down(Path(tmp) / "stack")
    ours_s = harness.median([r["wall_s"] for r in ours])
    tune_s = harness.median([r["wall_s"] for r in theirs])
    full_epochs = harness.median([r["epochs"] for r in ours])
    asha_epochs = harness.median([r["epochs"] for r in with_asha])
    best_full = max(r["best_accuracy"] for r in ours)
    best_asha = harness.median([r["best_accuracy"] for r in with_asha])
    return harness.result(
        "sweep",
        {"trials": trials, "slots": slots, "rounds": rounds, "model": "digits_mlp", "lrs": lrs, "config": config,
         "asha": {"grace_period": 1, "reduction_factor": 4, "max_t": config["epochs"] + 1}},
        {
            "paddleray_sweep_s_median": ours_s, "tune_sweep_s_median": tune_s,
            "paddleray_sweep_s": [r["wall_s"] for r in ours], "tune_sweep_s": [r["wall_s"] for r in theirs],
            "best_accuracy_paddleray": best_full, "best_accuracy_tune": max(r["best_accuracy"] for r in theirs),
            "epochs_without_asha": full_epochs, "epochs_with_asha": asha_epochs,
            "epochs_without_asha_per_round": [r["epochs"] for r in ours],
            "epochs_with_asha_per_round": [r["epochs"] for r in with_asha],
            "best_accuracy_with_asha": best_asha,
            "asha_best_accuracy_gap": abs(best_full - best_asha),
            "trials_early_stopped": [r["early_stopped"] for r in with_asha],
            "asha_sweep_s_median": harness.median([r["wall_s"] for r in with_asha]),
        },
        {"sweep_vs_tune": ours_s / tune_s, "asha_compute_fraction": asha_epochs / full_epochs},
        TARGETS,
        per_round={
            "sweep_vs_tune": harness.paired([r["wall_s"] for r in ours], [r["wall_s"] for r in theirs]),
            "asha_compute_fraction": harness.paired([r["epochs"] for r in with_asha], [r["epochs"] for r in ours]),
        },
        # Trials that ran to their end (or to an ASHA stop) on each side.
        sides={
            "paddleray": sum(r["trials"] for r in ours), "ray_tune": sum(r["trials"] for r in theirs),
            "paddleray_asha": sum(r["trials"] for r in with_asha),
        },
        # The compute saved counts only at equal best accuracy (within one point).
        preconditions={"asha_compute_fraction": abs(best_full - best_asha) <= 0.01},
    )
