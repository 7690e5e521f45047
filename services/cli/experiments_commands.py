"""`paddleray sweep EXPERIMENT.yaml` and `paddleray experiments list | get | watch | cancel`."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import experiment_pb2
from paddleray.services.cli import output, session
from paddleray.services.cli.jobs_commands import WaitTimeoutOption, _duration
from paddleray.services.cli.output import ExitCode, Format, OutputOption
from paddleray.services.cli.progress import format_number, state_name
from paddleray.services.client import TERMINAL_JOB_STATES, Client, load_experiment
from paddleray.services.common import structs

app = typer.Typer(help="Hyperparameter sweeps.", no_args_is_help=True)
E = experiment_pb2.ExperimentState
ExperimentSpecArgument = typer.Argument(..., help="Experiment spec (YAML); see examples/sweep.yaml.")
_EXIT = {
    E.EXPERIMENT_STATE_SUCCEEDED: ExitCode.SUCCEEDED,
    E.EXPERIMENT_STATE_FAILED: ExitCode.FAILED,
    E.EXPERIMENT_STATE_CANCELLED: ExitCode.CANCELLED,
}


def experiment_state(state: int) -> str:
    return E.Name(state).removeprefix("EXPERIMENT_STATE_")


def trial_counts(experiment: experiment_pb2.Experiment) -> str:
    return " ".join(f"{state_name(c.state)}={c.count}" for c in experiment.trials_by_state if c.count)


def sweep(
    ctx: typer.Context,
    spec: Path = ExperimentSpecArgument,
    watch: bool = typer.Option(False, "--watch", help="Follow the sweep until it ends, then print its trials."),
    wait_timeout: str = WaitTimeoutOption,
) -> None:
    """Start a hyperparameter sweep described by a YAML spec file."""
    experiment, experiment_id = load_experiment(spec)
    client = session.client(ctx)
    created = client.create_experiment(experiment, experiment_id=experiment_id)  # ships a local working_dir first
    output.console().print(f"created {created.name} with {created.total_trials} trials", markup=False)
    if watch:
        raise typer.Exit(int(follow_experiment(client, created.name, _duration(wait_timeout, "--wait-timeout"))))


def follow_experiment(client: Client, name: str, wait_timeout: float | None = None,
                      fmt: Format = Format.table) -> ExitCode:
    """Progress until the sweep ends, then its trials and best trial (as JSON / YAML: each
    change of the experiment, then the final one with its trials); exit code by its state."""
    out = output.console()
    shown = ""

    def progress(experiment: experiment_pb2.Experiment) -> None:
        nonlocal shown
        if fmt != Format.table:
            output.emit_item(fmt, output.as_data(experiment))
            return
        line = f"{experiment.name} {experiment_state(experiment.state)}: {trial_counts(experiment)}"
        if line != shown:
            out.print(line, markup=False, highlight=False)
            shown = line

    finished = client.wait_experiment(name, timeout=wait_timeout, on_update=progress)
    if fmt != Format.table:
        output.emit_item(fmt, {**output.as_data(finished), "trials": [output.as_data(t) for t in client.trials(name)]})
    else:
        print_trials(client, finished)
    return _EXIT.get(finished.state, ExitCode.WAIT_TIMEOUT)


def best_reported(client: Client, trial, metric: str, maximize: bool) -> float | None:
    """The trial's best reported value of metric (the figure the experiment's best trial uses),
    from its events; None while the trial runs (its event stream would not end)."""
    if trial.state not in TERMINAL_JOB_STATES:
        return None
    values = [e.metrics.metrics[metric] for e in client.watch_job(trial.name, timeout=client.timeout)
              if e.WhichOneof("payload") == "metrics" and metric in e.metrics.metrics]
    if not values:
        return None
    return max(values) if maximize else min(values)


def print_trials(client: Client, experiment: experiment_pb2.Experiment) -> None:
    trials = sorted(client.trials(experiment.name), key=lambda job: job.name)
    metric = experiment.metric
    maximize = experiment.mode != common_pb2.METRIC_MODE_MIN
    rows = []
    for trial in trials:
        parameters = {k: json.loads(v) for k, v in sorted(trial.trial_parameters.items())}
        last = trial.latest_metrics.metrics.get(metric)
        best = best_reported(client, trial, metric, maximize)
        rows.append([
            trial.name, " ".join(f"{k}={json.dumps(structs.integral(v))}" for k, v in parameters.items()),
            state_name(trial.state), format_number(trial.latest_metrics.metrics.get("epoch", 0)),
            "-" if last is None else format_number(last), "-" if best is None else format_number(best),
        ])
    output.table(("trial", "parameters", "state", "epochs", f"last {metric}", f"best {metric}"), rows,
                 title=f"{experiment.name}: {experiment_state(experiment.state)}")
    best_trial = experiment.best_trial
    if best_trial.job:
        chosen = json.dumps(structs.to_python(best_trial.parameters))
        output.console().print(
            f"best trial: {best_trial.job} best {metric}={format_number(best_trial.metric_value)} "
            f"parameters={chosen} checkpoint={best_trial.checkpoint.uri or '-'}", markup=False, highlight=False,
            soft_wrap=True,
        )


@app.command(name="list")
def list_experiments(
    ctx: typer.Context, limit: int = typer.Option(50, min=1), fmt: Format = OutputOption) -> None:
    """List experiments, newest first."""
    experiments = list(session.client(ctx).list_experiments(limit=limit))
    if fmt != Format.table:
        output.emit(fmt, [output.as_data(e) for e in experiments])
        return
    rows = [
        [e.name, experiment_state(e.state), e.display_name, str(e.total_trials), trial_counts(e),
         e.best_trial.job or "-", f"{e.metric}={format_number(e.best_trial.metric_value)}" if e.best_trial.job else "-"]
        for e in experiments
    ]
    output.table(("experiment", "state", "display name", "trials", "by state", "best trial", "best"), rows)


@app.command(name="get")
def get(
    ctx: typer.Context, name: str = typer.Argument(..., help="experiments/ID or ID"), fmt: Format = OutputOption) -> None:
    """Show an experiment and its trials."""
    client = session.client(ctx)
    experiment = client.get_experiment(name)
    if fmt != Format.table:
        data = output.as_data(experiment)
        data["trials"] = [output.as_data(t) for t in client.trials(experiment.name)]
        output.emit(fmt, data)
        return
    output.console().print(
        f"{experiment.name} {experiment_state(experiment.state)}"
        + (f" ({experiment.state_reason})" if experiment.state_reason else "")
        + f": {experiment.total_trials} trials, {trial_counts(experiment)}", markup=False, highlight=False,
    )
    print_trials(client, experiment)


@app.command(name="watch")
def watch(
    ctx: typer.Context, name: str = typer.Argument(..., help="experiments/ID or ID"), wait_timeout: str = WaitTimeoutOption,
    fmt: Format = OutputOption,
) -> None:
    """Follow an experiment until it ends; exit code by its final state."""
    raise typer.Exit(int(follow_experiment(session.client(ctx), name, _duration(wait_timeout, "--wait-timeout"), fmt)))


@app.command()
def cancel(
    ctx: typer.Context, name: str = typer.Argument(..., help="experiments/ID or ID")) -> None:
    """Cancel an experiment and its running trials."""
    experiment = session.client(ctx).cancel_experiment(name, reason="cancelled from the CLI")
    output.console().print(f"{experiment.name}: {experiment_state(experiment.state)}", markup=False)
