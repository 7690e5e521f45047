"""`paddleray demo`: the README's main command.

Starts the whole local stack (Redis, a Ray head, the three services), then drives it the way a
user would, over gRPC: a data-parallel training job followed event by event, its worker logs,
and a hyperparameter sweep with ASHA early stopping and its best trial; then stops the stack.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import typer
from google.protobuf import json_format, struct_pb2
from rich.console import Console
from rich.table import Table

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import experiment_pb2, experiment_service_pb2, job_service_pb2
from paddleray.services.cli.client import Clients, connect
from paddleray.services.cli.jobs_commands import build_job, follow, state_name
from paddleray.services.cli.stack_commands import StateDir, show
from paddleray.services.localstack import stack

console = Console()

MLP = "paddleray.services.trainer.examples.digits_mlp:train"


def demo(
    state_dir: Path = StateDir,
    keep: bool = typer.Option(False, help="Leave the stack running afterwards."),
) -> None:
    """Start the local stack, train, sweep, and stop it again."""
    with console.status("starting Redis, a local Ray head and the three services ..."):
        state = stack.up(state_dir)
    try:
        if not show(state):
            raise typer.Exit(1)
        clients = connect(state_dir)
        data_parallel_job(clients)
        sweep(clients)
    finally:
        if not keep:
            stack.down(state_dir)
            console.print("stack stopped (use --keep to leave it running)")


def data_parallel_job(clients: Clients) -> None:
    console.rule("1. a data-parallel training job: 2 ranks, gloo collective, checkpoint every epoch")
    job = build_job(MLP, {"epochs": 4, "lr": 0.05, "hidden_sizes": [64]}, workers=2, cpus=1, labels={"demo": "dp"})
    created = clients.jobs.CreateJob(
        job_service_pb2.CreateJobRequest(job=job, request_id=uuid.uuid4().hex), metadata=clients.metadata
    ).job
    finished = follow(clients, created.name)
    console.print(f"{finished.name} ended [bold]{state_name(finished.state)}[/bold] after {len(finished.attempts)} attempt(s)")
    console.rule("its worker logs (last 3 lines per rank)")
    request = job_service_pb2.GetJobLogsRequest(name=created.name, tail_lines=3)
    for response in clients.jobs.GetJobLogs(request, metadata=clients.metadata):
        for line in response.lines:
            console.print(f"rank {line.rank} | {line.text}", markup=False, highlight=False)


def sweep(clients: Clients) -> None:
    console.rule("2. a sweep: 6 trials of learning rate x width, 2 at a time, ASHA on accuracy")
    template = build_job(MLP, {"epochs": 6}, workers=1, cpus=1)
    space = experiment_pb2.SearchSpace()
    space.parameters["lr"].grid.values.extend([struct_pb2.Value(number_value=v) for v in (0.3, 0.03, 0.001)])
    space.parameters["hidden_sizes"].choice.values.extend(
        [json_format.ParseDict([32], struct_pb2.Value()), json_format.ParseDict([128], struct_pb2.Value())]
    )
    experiment = experiment_pb2.Experiment(
        display_name="demo sweep", trial_template=template, search_space=space,
        algorithm=experiment_pb2.SEARCH_ALGORITHM_GRID, num_samples=2, max_concurrent_trials=2,
        metric="accuracy", mode=common_pb2.METRIC_MODE_MAX, seed=7,
    )
    experiment.early_stopping.asha.time_attr = "epoch"
    experiment.early_stopping.asha.max_t = 6
    experiment.early_stopping.asha.grace_period = 2
    experiment.early_stopping.asha.reduction_factor = 2
    created = clients.experiments.CreateExperiment(
        experiment_service_pb2.CreateExperimentRequest(experiment=experiment, request_id=uuid.uuid4().hex),
        metadata=clients.metadata,
    ).experiment
    console.print(f"created {created.name} with {created.total_trials} trials")
    current = created
    last_progress = ""
    while current.state == experiment_pb2.EXPERIMENT_STATE_RUNNING:
        time.sleep(1.0)
        current = clients.experiments.GetExperiment(
            experiment_service_pb2.GetExperimentRequest(name=created.name), metadata=clients.metadata
        ).experiment
        progress = ", ".join(f"{state_name(c.state)}={c.count}" for c in current.trials_by_state if c.count)
        if progress != last_progress:
            console.print(f"trials: {progress}")
            last_progress = progress
    trials = clients.jobs.ListJobs(
        job_service_pb2.ListJobsRequest(experiment=created.name, page_size=100), metadata=clients.metadata
    ).jobs
    table = Table(title=f"{created.name}: {experiment_pb2.ExperimentState.Name(current.state).removeprefix('EXPERIMENT_STATE_')}")
    for column in ("trial", "parameters", "state", "epochs", "accuracy"):
        table.add_column(column)
    for trial in sorted(trials, key=lambda j: j.name):
        metrics = trial.latest_metrics.metrics
        table.add_row(
            trial.name.rsplit("-", 1)[-1], " ".join(f"{k}={v}" for k, v in sorted(trial.trial_parameters.items())),
            state_name(trial.state), f"{metrics.get('epoch', 0):.0f}", f"{metrics.get('accuracy', 0):.3f}",
        )
    console.print(table)
    best = current.best_trial
    console.print(f"best trial: [bold]{best.job}[/bold] accuracy={best.metric_value:.3f} checkpoint={best.checkpoint.uri}")
