"""`paddleray demo`: the README's main command.

Uses the local stack when one is already running (and leaves it running), else starts its own
(Redis, a Ray head, the three services) and stops it at the end; then drives it the way a user
would, through the SDK: a data-parallel training job followed event by event, its worker logs,
and a hyperparameter sweep with ASHA early stopping, its trials and its best trial.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import typer
from google.protobuf import struct_pb2
from rich.console import Console

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import experiment_pb2
from paddleray.services.cli.experiments_commands import follow_experiment
from paddleray.services.cli.jobs_commands import build_job, follow
from paddleray.services.cli.output import ExitCode
from paddleray.services.cli.stack_commands import StateDir, show
from paddleray.services.client import Client, ConnectionConfig, TlsConfig
from paddleray.services.common import structs
from paddleray.services.localstack import stack

console = Console()

MLP = "paddleray.services.trainer.examples.digits_mlp:train"


@contextlib.contextmanager
def demo_stack(state_dir: Path, keep: bool) -> Iterator[stack.StackState]:
    """A running stack: the one already up in state_dir (never stopped here), else our own."""
    existing = stack.StackState.load(state_dir)
    if existing is not None and all(existing.serving(name) for name in existing.services):
        console.print(f"using the stack already running ({stack.state_file(state_dir)}); it stays running")
        yield existing
        return
    with console.status("starting Redis, a local Ray head and the three services ..."):
        state = stack.up(state_dir)
    try:
        yield state
    finally:
        if not keep:
            stack.down(state_dir)
            console.print("stack stopped (use --keep to leave it running)")


def demo(
    state_dir: Path = StateDir,
    keep: bool = typer.Option(False, help="Leave a stack the demo started running afterwards."),
) -> None:
    """Train, sweep and show the results on the local stack (started and stopped if none runs)."""
    with demo_stack(state_dir, keep) as state:
        if not show(state):
            raise typer.Exit(int(ExitCode.UNREACHABLE))
        settings = ConnectionConfig(address=state.address("scheduler"), exporter_address=state.address("exporter"),
                                    tls=TlsConfig(ca=state.tls_ca) if state.tls_ca else None,
                                    source=f"local stack {stack.state_file(state_dir)}")
        with Client(settings) as client:
            data_parallel_job(client)
            sweep(client)


def data_parallel_job(client: Client) -> None:
    console.rule("1. a data-parallel training job: 2 ranks, gloo collective, checkpoint every epoch")
    job = build_job(MLP, {"epochs": 4, "lr": 0.05, "hidden_sizes": [64]}, workers=2, cpus=1, labels={"demo": "dp"})
    created = client.create_job(job)
    follow(client, created.name)
    console.rule("its worker logs (last 3 lines per rank)")
    for line in client.job_logs(created.name, tail_lines=3):
        console.print(f"rank {line.rank} | {line.text}", markup=False, highlight=False)


def sweep(client: Client) -> None:
    console.rule("2. a sweep: 6 trials of learning rate x width, 2 at a time, ASHA on accuracy")
    template = build_job(MLP, {"epochs": 6}, workers=1, cpus=1)
    space = experiment_pb2.SearchSpace()
    space.parameters["lr"].grid.values.extend([struct_pb2.Value(number_value=v) for v in (0.3, 0.03, 0.001)])
    space.parameters["hidden_sizes"].choice.values.extend(
        [structs.to_struct({"v": width}).fields["v"] for width in ([32], [128])]
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
    created = client.create_experiment(experiment)
    console.print(f"created {created.name} with {created.total_trials} trials")
    follow_experiment(client, created.name)
