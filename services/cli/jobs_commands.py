"""`paddleray jobs ...`: submit, list, watch, logs and cancel training jobs."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import grpc
import typer
from google.protobuf import duration_pb2, json_format, struct_pb2
from rich.console import Console
from rich.table import Table
from rich.text import Text

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2, job_service_pb2
from paddleray.services.cli.client import Clients, connect
from paddleray.services.cli.stack_commands import StateDir

console = Console()
app = typer.Typer(help="Training jobs.", no_args_is_help=True)
Token = typer.Option("", envvar="PADDLERAY_TOKEN", help="Bearer token, when the services require one.")

TERMINAL = {
    job_pb2.JOB_STATE_SUCCEEDED, job_pb2.JOB_STATE_FAILED, job_pb2.JOB_STATE_CANCELLED,
    job_pb2.JOB_STATE_TIMED_OUT, job_pb2.JOB_STATE_EARLY_STOPPED,
}


def state_name(state: int) -> str:
    return job_pb2.JobState.Name(state).removeprefix("JOB_STATE_")


def build_job(
    entrypoint: str, config: dict, workers: int = 1, cpus: float = 1.0, gpus: float = 0.0,
    max_retries: int = 0, timeout_s: float = 0, priority: int = 0, tenant: str = "", labels: dict | None = None,
) -> job_pb2.Job:
    spec = common_pb2.TrainingSpec(
        entrypoint=entrypoint, num_workers=workers,
        resources_per_worker=common_pb2.Resources(num_cpus=cpus, num_gpus=gpus),
    )
    spec.config.CopyFrom(json_format.ParseDict(config, struct_pb2.Struct()))
    job = job_pb2.Job(spec=spec, priority=priority, tenant=tenant, labels=labels or {})
    job.retry_policy.max_retries = max_retries
    if timeout_s:
        job.timeout.CopyFrom(duration_pb2.Duration(seconds=int(timeout_s)))
    return job


def _fail(error: grpc.RpcError) -> typer.Exit:
    console.print(f"[red]{error.code().name}[/red]: {error.details()}")
    return typer.Exit(2)


@app.command()
def submit(
    entrypoint: str = typer.Argument(..., help="package.module:function"),
    config: str = typer.Option("{}", help="JSON config handed to the function."),
    workers: int = typer.Option(1, help="Data-parallel ranks."),
    cpus: float = typer.Option(1.0, help="CPUs per rank."),
    gpus: float = typer.Option(0.0, help="GPUs per rank (fractional allowed for one rank)."),
    max_retries: int = typer.Option(0),
    timeout: float = typer.Option(0, help="Seconds; 0 means none."),
    watch_job: bool = typer.Option(False, "--watch", help="Follow the job's events until it ends."),
    state_dir: Path = StateDir,
    token: str = Token,
) -> None:
    """Queue a training job."""
    clients = connect(state_dir, token)
    job = build_job(entrypoint, json.loads(config), workers, cpus, gpus, max_retries, timeout)
    try:
        created = clients.jobs.CreateJob(
            job_service_pb2.CreateJobRequest(job=job, request_id=uuid.uuid4().hex), metadata=clients.metadata
        ).job
    except grpc.RpcError as error:
        raise _fail(error) from None
    console.print(f"created [bold]{created.name}[/bold] ({state_name(created.state)})")
    if watch_job:
        follow(clients, created.name)


@app.command(name="list")
def list_jobs(state_dir: Path = StateDir, token: str = Token, page_size: int = 50) -> None:
    """List jobs, newest first."""
    clients = connect(state_dir, token)
    response = clients.jobs.ListJobs(job_service_pb2.ListJobsRequest(page_size=page_size), metadata=clients.metadata)
    table = Table()
    for column in ("job", "state", "entrypoint", "workers", "attempts", "last metrics"):
        table.add_column(column)
    for job in response.jobs:
        metrics = ", ".join(f"{k}={v:.4g}" for k, v in sorted(job.latest_metrics.metrics.items()))
        table.add_row(job.name, state_name(job.state), job.spec.entrypoint, str(job.spec.num_workers or 1), str(len(job.attempts)), metrics)
    console.print(table)


@app.command()
def watch(name: str, state_dir: Path = StateDir, token: str = Token) -> None:
    """Follow a job's events until it ends."""
    follow(connect(state_dir, token), name)


def follow(clients: Clients, name: str, after_sequence: int = 0) -> job_pb2.Job:
    """Prints a job's events until its terminal state; resumes after a dropped stream."""
    while True:
        try:
            for response in clients.jobs.WatchJob(
                job_service_pb2.WatchJobRequest(name=name, after_sequence=after_sequence), metadata=clients.metadata
            ):
                event = response.event
                after_sequence = event.sequence
                print_event(name, event)
            return clients.jobs.GetJob(job_service_pb2.GetJobRequest(name=name), metadata=clients.metadata).job
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.UNAVAILABLE:
                raise _fail(error) from None


def print_event(name: str, event: job_pb2.JobEvent) -> None:
    prefix = f"[dim]{name} #{event.sequence}[/dim]"
    kind = event.WhichOneof("payload")
    if kind == "state_change":
        change = event.state_change
        reason = f" ({change.reason})" if change.reason else ""
        console.print(f"{prefix} {state_name(change.from_state)} -> [bold]{state_name(change.to_state)}[/bold]{reason}")
    elif kind == "metrics":
        shown = ", ".join(f"{k}={v:.4g}" for k, v in sorted(event.metrics.metrics.items()))
        console.print(f"{prefix} metrics: {shown}")
    elif kind == "checkpoint":
        console.print(f"{prefix} checkpoint epoch {event.checkpoint.epoch}: {event.checkpoint.uri}")


@app.command()
def logs(
    name: str,
    follow_logs: bool = typer.Option(False, "--follow", "-f"),
    tail: int = typer.Option(0, help="Last N lines of each rank."),
    rank: int = typer.Option(-1, help="Only this rank (-1: all)."),
    state_dir: Path = StateDir,
    token: str = Token,
) -> None:
    """Print a job's worker logs."""
    clients = connect(state_dir, token)
    request = job_service_pb2.GetJobLogsRequest(name=name, follow=follow_logs, tail_lines=tail)
    if rank >= 0:
        request.rank = rank
    try:
        for response in clients.jobs.GetJobLogs(request, metadata=clients.metadata):
            for line in response.lines:
                console.print(Text.assemble((f"[rank {line.rank}] ", "dim"), line.text), highlight=False)
    except grpc.RpcError as error:
        raise _fail(error) from None


@app.command()
def cancel(name: str, state_dir: Path = StateDir, token: str = Token) -> None:
    """Cancel a job."""
    clients = connect(state_dir, token)
    try:
        job = clients.jobs.CancelJob(job_service_pb2.CancelJobRequest(name=name, reason="cancelled from the CLI"), metadata=clients.metadata).job
    except grpc.RpcError as error:
        raise _fail(error) from None
    console.print(f"{job.name}: {state_name(job.state)}")
