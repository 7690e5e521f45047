"""The demo's training half: a sweep of the digits MLP with live progress, what each trial
reported, and the best configuration retrained data-parallel from the best trial's checkpoint."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from google.protobuf import struct_pb2
from rich.console import Console
from rich.live import Live
from rich.table import Table

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import experiment_pb2, job_pb2
from paddleray.services.cli.demo_report import TrialResult, parameters_text
from paddleray.services.cli.jobs_commands import build_job, follow
from paddleray.services.cli.output import ExitCode
from paddleray.services.cli.progress import format_number, state_name
from paddleray.services.client import TERMINAL_EXPERIMENT_STATES, TERMINAL_JOB_STATES, Client
from paddleray.services.common import structs

MLP = "paddleray.services.trainer.examples.digits_mlp:train"
METRIC = "accuracy"


class DemoFailed(Exception):
    """A step ended in a state the next step cannot start from; the message says which."""


@dataclass(frozen=True)
class SweepPlan:
    """A 2 x 2 grid (learning rate x width), 2 trials at a time, ASHA on the validation accuracy.
    Small on purpose: the whole demo runs in a few minutes on 2 cores."""

    epochs: int = 6
    learning_rates: tuple[float, ...] = (0.05, 0.005)
    hidden_sizes: tuple[tuple[int, ...], ...] = ((32,), (64,))
    max_concurrent: int = 2
    retrain_epochs: int = 3
    retrain_workers: int = 2
    # Fine-tuning from a converged checkpoint with the sweep's learning rate and a fresh
    # optimizer undid part of it (seen: 0.975 -> 0.953): a tenth of it refines instead.
    finetune_lr_factor: float = 0.1

    def template_config(self) -> dict:
        return {"epochs": self.epochs}

    def experiment(self, labels: dict[str, str]) -> experiment_pb2.Experiment:
        template = build_job(MLP, self.template_config(), workers=1, cpus=1, labels=labels)
        # Each trial's best checkpoint by the experiment's metric: init_from.job and exports use it.
        template.spec.checkpoint_policy.best_metric = METRIC
        template.spec.checkpoint_policy.best_mode = common_pb2.METRIC_MODE_MAX
        space = experiment_pb2.SearchSpace()
        space.parameters["lr"].grid.values.extend([struct_pb2.Value(number_value=v) for v in self.learning_rates])
        space.parameters["hidden_sizes"].grid.values.extend(
            [structs.to_struct({"v": list(sizes)}).fields["v"] for sizes in self.hidden_sizes]
        )
        experiment = experiment_pb2.Experiment(
            display_name="demo sweep", trial_template=template, search_space=space,
            algorithm=experiment_pb2.SEARCH_ALGORITHM_GRID, num_samples=1, max_concurrent_trials=self.max_concurrent,
            metric=METRIC, mode=common_pb2.METRIC_MODE_MAX, seed=7,
        )
        asha = experiment.early_stopping.asha
        asha.time_attr, asha.max_t, asha.grace_period, asha.reduction_factor = "epoch", self.epochs, 2, 2
        return experiment


def trial_parameters(job: job_pb2.Job) -> dict:
    return {k: structs.integral(json.loads(v)) for k, v in job.trial_parameters.items()}


def observe(client: Client, job: job_pb2.Job, metric: str = METRIC) -> TrialResult:
    """A finished job's per-epoch metrics and its best checkpoint by metric (the first of ties,
    as the scheduler ranks them), from its event stream."""
    result = TrialResult(job=job.name, parameters=trial_parameters(job), state=state_name(job.state))
    best_value = None
    for event in client.watch_job(job.name, timeout=client.timeout):
        kind = event.WhichOneof("payload")
        if kind == "metrics":
            result.curve.append(structs.integral(dict(event.metrics.metrics)))
        elif kind == "checkpoint" and metric in event.checkpoint.metrics:
            value = event.checkpoint.metrics[metric]
            if best_value is None or value > best_value:
                best_value = value
                result.best_checkpoint = checkpoint_data(event.checkpoint)
    return result


def checkpoint_data(checkpoint: common_pb2.Checkpoint) -> dict:
    return {"uri": checkpoint.uri, "epoch": checkpoint.epoch, "metrics": dict(checkpoint.metrics)}


class SweepProgress:
    """Every trial's state, epoch and latest accuracy: a table redrawn in place on a terminal,
    one line per change in a pipe."""

    def __init__(self, console: Console, epochs: int) -> None:
        self.console = console
        self.epochs = epochs
        self.shown: dict[str, tuple] = {}
        self._live: Live | None = None

    def __enter__(self) -> SweepProgress:
        if self.console.is_terminal:
            self._live = Live(Table(), console=self.console, refresh_per_second=4, transient=False)
            self._live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.stop()

    def update(self, experiment: experiment_pb2.Experiment, trials: list[job_pb2.Job]) -> None:
        rows = []
        for trial in sorted(trials, key=lambda j: j.name):
            metrics = trial.latest_metrics.metrics
            epoch = structs.integral(metrics.get("epoch", 0))
            accuracy = "-" if METRIC not in metrics else format_number(metrics[METRIC])
            row = (trial.name, parameters_text(trial_parameters(trial)), state_name(trial.state),
                   f"{epoch}/{self.epochs}", accuracy)
            rows.append(row)
            if self._live is None and self.shown.get(trial.name) != row:
                self.console.print(f"{row[0]} {row[1]}: {row[2]} epoch {row[3]} {METRIC}={row[4]}",
                                   markup=False, highlight=False, soft_wrap=True)
            self.shown[trial.name] = row
        if self._live is not None:
            counts = " ".join(f"{state_name(c.state)}={c.count}" for c in experiment.trials_by_state if c.count)
            table = Table(title=f"{experiment.name}: {experiment.total_trials} trials, {counts}")
            for header in ("trial", "parameters", "state", "epoch", METRIC):
                table.add_column(header, no_wrap=header == "trial")
            for row in rows:
                table.add_row(*row)
            self._live.update(table)


def run_sweep(client: Client, console: Console, plan: SweepPlan, labels: dict[str, str],
              poll_interval_s: float = 1.0) -> tuple[experiment_pb2.Experiment, list[TrialResult]]:
    created = client.create_experiment(plan.experiment(labels))
    console.print(f"created {created.name}: {created.total_trials} trials, {plan.max_concurrent} at a time, "
                  f"{plan.epochs} epochs each, ASHA on {METRIC}", markup=False)
    with SweepProgress(console, plan.epochs) as progress:
        # Polled every second, not only on experiment changes: epochs advance inside trials.
        while True:
            finished = client.get_experiment(created.name)
            progress.update(finished, client.trials(finished.name))
            if finished.state in TERMINAL_EXPERIMENT_STATES:
                break
            time.sleep(poll_interval_s)
    if finished.state != experiment_pb2.EXPERIMENT_STATE_SUCCEEDED or not finished.best_trial.job:
        state = experiment_pb2.ExperimentState.Name(finished.state)
        raise DemoFailed(f"{finished.name} ended {state} {finished.state_reason}".strip())
    trials = [observe(client, job) for job in sorted(client.trials(finished.name), key=lambda j: j.name)]
    return finished, trials


def best_line(experiment: experiment_pb2.Experiment) -> str:
    """The best trial by the same figure the table's best-checkpoint column shows."""
    best = experiment.best_trial
    value = best.checkpoint.metrics.get(METRIC, best.metric_value)
    return (f"best trial: {best.job} best-checkpoint {METRIC}={format_number(value)} "
            f"(epoch {best.checkpoint.epoch}) parameters={json.dumps(structs.to_python(best.parameters))} "
            f"checkpoint={best.checkpoint.uri or '-'}")


def retrain(client: Client, console: Console, plan: SweepPlan, experiment: experiment_pb2.Experiment,
            labels: dict[str, str]) -> tuple[job_pb2.Job, TrialResult]:
    """The best trial's configuration on plan.retrain_workers data-parallel ranks, fine-tuned
    from that trial's best checkpoint (init_from.job, resolved by the scheduler at CreateJob)."""
    best = experiment.best_trial
    config = {**plan.template_config(), **structs.to_python(best.parameters), "epochs": plan.retrain_epochs}
    config["lr"] = float(f"{config.get('lr', 0.01) * plan.finetune_lr_factor:.6g}")
    job = build_job(MLP, config, workers=plan.retrain_workers, cpus=1, labels=labels)
    job.spec.init_from.job = best.job
    job.spec.checkpoint_policy.best_metric = METRIC
    job.spec.checkpoint_policy.best_mode = common_pb2.METRIC_MODE_MAX
    created = client.create_job(job)
    resolved = created.spec.init_from.resolved_uri
    same = "the best trial's best checkpoint" if resolved == best.checkpoint.uri else "NOT the best trial's checkpoint"
    console.print(f"created {created.name}: config={json.dumps(config)} on {plan.retrain_workers} ranks, "
                  f"starting from {resolved} ({same})", markup=False, highlight=False, soft_wrap=True)
    if follow(client, created.name) != ExitCode.SUCCEEDED:
        raise DemoFailed(f"{created.name} ended {state_name(client.get_job(created.name).state)}")
    finished = client.get_job(created.name)
    if finished.state not in TERMINAL_JOB_STATES:
        raise DemoFailed(f"{created.name} is still {state_name(finished.state)}")
    return finished, observe(client, finished)
