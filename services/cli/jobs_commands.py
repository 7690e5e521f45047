"""`paddleray submit | watch | logs` and `paddleray jobs ...`: training jobs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import typer
from rich.text import Text

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2
from paddleray.services.cli import output, session
from paddleray.services.cli.output import ExitCode, Format, OutputOption
from paddleray.services.cli.progress import JobProgress, first_line, format_number, metrics_text, state_name
from paddleray.services.client import Client, experiment_name, job_name, load_job, specs
from paddleray.services.common import structs, training_spec

app = typer.Typer(help="Training jobs.", no_args_is_help=True)

WaitTimeoutOption = typer.Option(None, "--wait-timeout", help="Stop watching after this long (90, 10m); exit code 8.")
STATES = [name.removeprefix("JOB_STATE_") for name in job_pb2.JobState.keys()[1:]]
JobSpecArgument = typer.Argument(..., help="Job spec (YAML); see examples/job.yaml.")
StateOption = typer.Option(None, "--state", help=f"Only these states ({', '.join(STATES)}); repeatable.")
LabelOption = typer.Option(None, "--label", help="KEY=VALUE; repeatable.")


def build_job(
    entrypoint: str, config: dict, workers: int = 1, cpus: float = 1.0, gpus: float = 0.0,
    max_retries: int = 0, timeout_s: float = 0, priority: int = 0, tenant: str = "", labels: dict | None = None,
) -> job_pb2.Job:
    spec = common_pb2.TrainingSpec(
        entrypoint=entrypoint, num_workers=workers,
        resources_per_worker=common_pb2.Resources(num_cpus=cpus, num_gpus=gpus),
    )
    spec.config.CopyFrom(structs.to_struct(config))
    job = job_pb2.Job(spec=spec, priority=priority, tenant=tenant, labels=labels or {})
    job.retry_policy.max_retries = max_retries
    if timeout_s:
        job.timeout.FromNanoseconds(int(timeout_s * 1e9))
    return job


def _duration(value: str | None, option: str) -> float | None:
    if value is None:
        return None
    try:
        return specs.parse_duration(float(value) if _is_number(value) else value)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint=option) from None


def json_object(value: str, option: str, example: str) -> dict:
    """An option's JSON object (a function's or a model's config), else a usage error naming it."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as error:
        raise typer.BadParameter(f"not valid JSON: {error.msg} at line {error.lineno} column {error.colno}",
                                 param_hint=option) from None
    if not isinstance(parsed, dict):
        raise typer.BadParameter(f"must be a JSON object such as '{example}'", param_hint=option)
    return parsed


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _finite(value: float, option: str, minimum: float = 0.0) -> float:
    if not math.isfinite(value) or value < minimum:
        raise typer.BadParameter(f"must be a finite number >= {minimum:g}, got {value}", param_hint=option)
    return value


@app.command()
def submit(
    ctx: typer.Context,
    entrypoint: str = typer.Argument(..., help="package.module:function"),
    config: str = typer.Option("{}", help="JSON object handed to the function as its config."),
    workers: int = typer.Option(1, min=1, max=1024, help="Data-parallel ranks."),
    cpus: float = typer.Option(1.0, help="CPUs per rank."),
    gpus: float = typer.Option(0.0, help="GPUs per rank (fractional allowed for one rank)."),
    max_retries: int = typer.Option(0, min=0, max=100),
    timeout: str = typer.Option("0", help="Job timeout: seconds, or 90s / 10m / 1h30m; 0 means none."),
    watch_job: bool = typer.Option(False, "--watch", help="Follow the job until it ends; exit code by its state."),
    wait_timeout: str = WaitTimeoutOption,
) -> None:
    """Queue a job from the command line (a spec file: `paddleray submit JOB.yaml`)."""
    parsed = json_object(config, "--config", '{"epochs": 3}')
    job = build_job(entrypoint, parsed, workers, _finite(cpus, "--cpus"), _finite(gpus, "--gpus"), max_retries,
                    _duration(timeout, "--timeout") or 0)
    _create_and_maybe_watch(ctx, job, "", watch_job, _duration(wait_timeout, "--wait-timeout"))


def submit_file(
    ctx: typer.Context,
    spec: Path = JobSpecArgument,
    watch_job: bool = typer.Option(False, "--watch", help="Follow the job until it ends; exit code by its state."),
    wait_timeout: str = WaitTimeoutOption,
) -> None:
    """Queue a job described by a YAML spec file."""
    job, job_id = load_job(spec)
    _create_and_maybe_watch(ctx, job, job_id, watch_job, _duration(wait_timeout, "--wait-timeout"))


def _create_and_maybe_watch(
    ctx: typer.Context, job: job_pb2.Job, job_id: str, watch_job: bool, wait_timeout: float | None,
) -> None:
    client = session.client(ctx)
    created = client.create_job(job, job_id=job_id)  # ships a local working_dir first
    output.console().print(f"created {created.name} ({state_name(created.state)})", markup=False)
    if watch_job:
        raise typer.Exit(int(follow(client, created.name, wait_timeout)))


def follow(client: Client, name: str, wait_timeout: float | None = None, fmt: Format = Format.table) -> ExitCode:
    """Shows the job's progress until it ends (or, as JSON / YAML, its events and the final
    job); the exit code of its final state."""
    job = client.get_job(name)
    if fmt != Format.table:
        for event in client.watch_job(job.name, timeout=wait_timeout):
            output.emit_item(fmt, output.as_data(event))
        finished = client.get_job(job.name)
        output.emit_item(fmt, output.as_data(finished))
        return output.job_exit_code(finished.state)
    with JobProgress(job, output.console()) as progress:
        for event in client.watch_job(job.name, timeout=wait_timeout):
            progress.update(event)
        finished = client.get_job(job.name)
        progress.finish(finished)
    return output.job_exit_code(finished.state)


@app.command(name="watch")
def watch(
    ctx: typer.Context, name: str = typer.Argument(..., help="jobs/ID or ID"), wait_timeout: str = WaitTimeoutOption,
    fmt: Format = OutputOption,
) -> None:
    """Follow a job until it ends; exit code by its final state (docs/cli.md)."""
    raise typer.Exit(int(follow(session.client(ctx), name, _duration(wait_timeout, "--wait-timeout"), fmt)))


def watch_any(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="jobs/ID, experiments/ID, or a job ID"),
    wait_timeout: str = WaitTimeoutOption,
    fmt: Format = OutputOption,
) -> None:
    """Follow a job or an experiment until it ends; exit code by its final state."""
    if name.startswith("experiments/"):
        from paddleray.services.cli.experiments_commands import follow_experiment

        raise typer.Exit(int(follow_experiment(session.client(ctx), name, _duration(wait_timeout, "--wait-timeout"), fmt)))
    raise typer.Exit(int(follow(session.client(ctx), name, _duration(wait_timeout, "--wait-timeout"), fmt)))


def job_rows(jobs: list[job_pb2.Job]) -> list[list[str]]:
    return [
        [job.name, state_name(job.state), job.spec.entrypoint, str(job.spec.num_workers or 1), str(len(job.attempts)),
         metrics_text(job.latest_metrics.metrics)]
        for job in jobs
    ]


JOB_HEADERS = ("job", "state", "entrypoint", "workers", "attempts", "last metrics")


@app.command(name="list")
def list_jobs(
    ctx: typer.Context,
    state: list[str] = StateOption,
    experiment: str = typer.Option("", help="Only trials of this experiment."),
    label: list[str] = LabelOption,
    limit: int = typer.Option(50, min=1, help="At most this many jobs, newest first."),
    page_size: int = typer.Option(100, min=1, max=1000, help="Jobs per request (the service allows 1-1000)."),
    fmt: Format = OutputOption,
) -> None:
    """List jobs, newest first."""
    states: list[job_pb2.JobState | str] = []
    for given in state or []:
        if given.upper() not in STATES:
            raise typer.BadParameter(f"{given!r} is not one of {', '.join(STATES)}", param_hint="--state")
        states.append(f"JOB_STATE_{given.upper()}")
    labels = {}
    for item in label or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--label")
        labels[key] = value
    # One more than asked for: whether there are more than --limit is then known, and said.
    jobs = list(session.client(ctx).list_jobs(
        limit=limit + 1, page_size=min(page_size, limit + 1), states=states, labels=labels,
        experiment=experiment_name(experiment) if experiment else "",
    ))
    more, jobs = len(jobs) > limit, jobs[:limit]
    if more:
        output.err_console().print(f"showing the newest {limit} jobs; there are more (raise --limit)", soft_wrap=True)
    if fmt != Format.table:
        output.emit(fmt, [output.as_data(job) for job in jobs])
        return
    output.table(JOB_HEADERS, job_rows(jobs), keep=(0, 1))


@app.command(name="get")
def get(
    ctx: typer.Context, name: str = typer.Argument(..., help="jobs/ID or ID"), fmt: Format = OutputOption) -> None:
    """Show one job: spec, state, attempts, latest checkpoint and metrics."""
    job = session.client(ctx).get_job(name)
    if fmt != Format.table:
        output.emit(fmt, output.as_data(job))
        return
    config = structs.to_python(job.spec.config)
    rows = [
        ("name", job.name), ("state", state_name(job.state) + (f" ({job.state_reason})" if job.state_reason else "")),
        ("entrypoint", job.spec.entrypoint), ("config", json.dumps(config)),
        ("workers", str(job.spec.num_workers or 1)),
        ("resources", f"cpus={format_number(training_spec.cpus(job.spec.resources_per_worker))} "
                      f"gpus={format_number(job.spec.resources_per_worker.num_gpus)} per rank"),
        ("experiment", job.experiment or "-"),
        ("trial parameters", " ".join(f"{k}={v}" for k, v in sorted(job.trial_parameters.items())) or "-"),
        ("attempts", ", ".join(f"#{a.number} {state_name(a.state)}" for a in job.attempts) or "-"),
        ("latest metrics", metrics_text(job.latest_metrics.metrics) or "-"),
        ("latest checkpoint", job.latest_checkpoint.uri or "-"),
    ]
    output.pairs(rows)


@app.command(name="logs")
def logs(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="jobs/ID or ID"),
    follow_logs: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines until the attempt ends."),
    tail: int = typer.Option(0, min=0, help="Start with the last N lines of each rank."),
    rank: int = typer.Option(None, min=0, help="Only this rank."),
    attempt: int = typer.Option(0, min=0, help="Attempt number; 0 is the newest."),
    fmt: Format = OutputOption,
) -> None:
    """Print a job's worker logs (resumes by itself after a dropped connection)."""
    out = output.console()
    client = session.client(ctx)
    job = client.get_job(name)
    waiting = {job_pb2.JOB_STATE_QUEUED, job_pb2.JOB_STATE_STARTING, job_pb2.JOB_STATE_UNSPECIFIED}
    # With --follow the lines are waited for; without, a job no rank has run yet has logged nothing.
    if not follow_logs and job.state in waiting and all(a.state in waiting for a in job.attempts):
        reason = f", {first_line(job.state_reason)}" if job.state_reason else ""
        output.err_console().print(f"{job.name} has not started yet ({state_name(job.state)}{reason}): it has no logs",
                                   soft_wrap=True)
        return
    lines = client.job_logs(job.name, follow=follow_logs, tail_lines=tail, rank=rank, attempt=attempt)
    for sequence, line in enumerate(lines, start=1):
        if fmt != Format.table:
            # Every field, rank 0 included (proto JSON drops zero values), and the line's number in this output.
            output.emit_item(fmt, {**output.as_data(line), "rank": line.rank, "sequence": sequence})
            continue
        out.print(Text.assemble((f"[rank {line.rank}] ", "dim"), line.text), highlight=False, soft_wrap=True)


@app.command()
def cancel(
    ctx: typer.Context, name: str = typer.Argument(..., help="jobs/ID or ID"),
           reason: str = typer.Option("cancelled from the CLI", help="Stored as the job's state reason.")) -> None:
    """Cancel a job."""
    job = session.client(ctx).cancel_job(job_name(name), reason=reason)
    output.console().print(f"{job.name}: {state_name(job.state)}", markup=False)
