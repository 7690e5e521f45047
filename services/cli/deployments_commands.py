"""`paddleray deployments create | list | get | update | delete`: model versions served on Ray
Serve behind the v2 inference endpoint."""

from __future__ import annotations

import math

import typer

from paddleray.exporter.v1 import deployment_pb2, model_pb2
from paddleray.services.cli import output, session
from paddleray.services.cli.jobs_commands import _duration
from paddleray.services.cli.models_commands import enum_name, when
from paddleray.services.cli.output import ExitCode, Format, OutputOption
from paddleray.services.cli.progress import first_line, format_number
from paddleray.services.client import Client, ServingOptions, new_deployment
from paddleray.services.client.deployments import BACKENDS, deployment_name, version_number

app = typer.Typer(help="Model versions served on Ray Serve (the v2 inference endpoint).", no_args_is_help=True)
D = deployment_pb2.DeploymentState
DeploymentArgument = typer.Argument(..., help="deployments/ID or ID")
DEFAULT_WAIT = "10m"

TrafficOption = typer.Option(None, "--traffic", help="Split over versions: VERSION=PERCENT,... (1=90,2=10); sums to 100.")
ReplicasOption = typer.Option(None, "--replicas", min=1, max=64, help="Fixed replicas per version.")
MinReplicasOption = typer.Option(None, "--min-replicas", min=0, max=64, help="Autoscaling: fewest replicas.")
MaxReplicasOption = typer.Option(None, "--max-replicas", min=1, max=64, help="Autoscaling: most replicas.")
TargetOption = typer.Option(None, "--target-ongoing-requests", help="Autoscaling: ongoing requests per replica.")
CpusOption = typer.Option(None, "--cpus", help="CPUs per replica (fractional allowed; the server's default: 1).")
GpusOption = typer.Option(None, "--gpus", help="GPUs per replica (fractional allowed).")
BatchOption = typer.Option(None, "--max-batch-size", min=1, max=1024, help="Dynamic batching: largest batch, 1-1024 (1: off).")
BatchWaitOption = typer.Option(None, "--batch-wait-ms", help="Dynamic batching: longest wait for a batch, ms.")
BackendOption = typer.Option(None, "--backend", help=f"Runtime: {', '.join(BACKENDS)} (auto: the fastest validated).")
ThreadsOption = typer.Option(None, "--threads", min=0, max=64, help="CPU math threads per replica.")
WaitOption = typer.Option(False, "--wait", help="Follow the rollout until HEALTHY (exit 8 after --wait-timeout).")
DeployWaitTimeoutOption = typer.Option(DEFAULT_WAIT, "--wait-timeout", help="With --wait: give up after this long.")


def deployment_state(state: int) -> str:
    return D.Name(state).removeprefix("DEPLOYMENT_STATE_")


def parse_traffic(text: str, option: str = "--traffic") -> dict[int, int]:
    """"1=90,2=10" -> {1: 90, 2: 10}: version numbers and whole percents summing to 100."""
    split: dict[int, int] = {}
    for item in text.split(","):
        version, sep, percent = item.strip().partition("=")
        try:
            number, share = int(version), int(percent)
        except ValueError:
            number = share = -1
        if not sep or number < 1 or not 0 <= share <= 100:
            raise typer.BadParameter(f"expected VERSION=PERCENT (a version number >= 1, a whole percent 0-100), "
                                     f"got {item.strip()!r}", param_hint=option)
        if number in split:
            raise typer.BadParameter(f"version {number} is given twice", param_hint=option)
        split[number] = share
    if sum(split.values()) != 100:
        raise typer.BadParameter(f"percents must sum to 100, got {sum(split.values())}", param_hint=option)
    return split


def _positive(value: float | None, option: str, minimum: float = 0.0) -> float | None:
    if value is not None and (not math.isfinite(value) or value < minimum):
        raise typer.BadParameter(f"must be a finite number >= {minimum:g}, got {value}", param_hint=option)
    return value


def serving_options(replicas, min_replicas, max_replicas, target, cpus, gpus, max_batch_size, batch_wait_ms,
                    backend, threads) -> ServingOptions:
    """The flags as ServingOptions; BadParameter names the flag of a bad value."""
    if replicas is not None and (min_replicas is not None or max_replicas is not None):
        raise typer.BadParameter("a fixed count cannot be combined with --min-replicas / --max-replicas",
                                 param_hint="--replicas")
    if backend is not None and backend.lower() not in BACKENDS:
        raise typer.BadParameter(f"{backend!r} is not one of {', '.join(BACKENDS)}", param_hint="--backend")
    if target is not None and (not math.isfinite(target) or target <= 0):
        raise typer.BadParameter(f"must be a finite number > 0, got {target}", param_hint="--target-ongoing-requests")
    wait_ms = _positive(batch_wait_ms, "--batch-wait-ms")
    return ServingOptions(
        num_replicas=replicas, min_replicas=min_replicas, max_replicas=max_replicas, target_ongoing_requests=target,
        num_cpus=_positive(cpus, "--cpus"), num_gpus=_positive(gpus, "--gpus"), max_batch_size=max_batch_size,
        batch_wait_s=None if wait_ms is None else wait_ms / 1e3,
        backend=backend.lower() if backend is not None else None, cpu_threads=threads,
    )


def replicas_text(deployment: deployment_pb2.Deployment) -> str:
    return " ".join(f"v{version_number(s.model_version)}:{s.running_replicas}/{s.target_replicas}"
                    for s in deployment.version_statuses) or "-"


def nodes_text(deployment: deployment_pb2.Deployment) -> str:
    """Running replicas per Ray node (every version has the same replicas: the first status's)."""
    statuses = deployment.version_statuses
    if not statuses or not statuses[0].replicas_per_node:
        return "-"
    return " ".join(f"{n.node_id[:12]}({n.node_ip}):{n.running_replicas}" for n in statuses[0].replicas_per_node)


def traffic_text(deployment: deployment_pb2.Deployment) -> str:
    return ",".join(f"{version_number(t.model_version)}={t.percent}" for t in deployment.traffic)


def _state_line(deployment: deployment_pb2.Deployment) -> str:
    reason = f" ({first_line(deployment.state_reason)})" if deployment.state_reason else ""
    return f"{deployment.name} {deployment_state(deployment.state)} replicas {replicas_text(deployment)}{reason}"


def print_deployment(deployment: deployment_pb2.Deployment) -> None:
    scaling = deployment.autoscaling
    replicas = (f"autoscaling {scaling.min_replicas}-{scaling.max_replicas}"
                f" (target {format_number(scaling.target_ongoing_requests)} ongoing requests)"
                if deployment.HasField("autoscaling") else str(deployment.num_replicas or 1))
    resources = deployment.resources_per_replica
    batching = deployment.batching
    output.pairs([
        ("name", deployment.name),
        ("state", deployment_state(deployment.state) + (f" ({first_line(deployment.state_reason)})"
                                                        if deployment.state_reason else "")),
        ("model_name", f"{deployment.serving_name} (v2 gRPC at {deployment.endpoint or '-'} with metadata "
                       f"application: {deployment.serving_name})"),
        ("REST", deployment.http_endpoint or "-"),
        ("model", deployment.model or "-"),
        ("traffic", traffic_text(deployment) + "  (version=percent)"),
        ("replicas", replicas),
        ("per replica", f"cpus={format_number(resources.num_cpus)} gpus={format_number(resources.num_gpus)}"),
        ("batching", f"max {batching.max_batch_size}, wait " + (
            f"{batching.batch_wait_timeout.ToNanoseconds() / 1e6:g} ms" if batching.HasField("batch_wait_timeout")
            else "5 ms (default)") if batching.max_batch_size > 1 else "off"),
        ("backend", enum_name(model_pb2.Backend, deployment.backend, "BACKEND_")
         if deployment.backend else "auto (per version, the fastest that passed validation)"),
        ("created", when(deployment.create_time)), ("updated", when(deployment.update_time)),
        ("nodes", nodes_text(deployment)),
    ])
    if deployment.version_statuses:
        output.table(("version", "backend", "state", "replicas", "message"), [
            [s.model_version, enum_name(model_pb2.Backend, s.backend, "BACKEND_"), deployment_state(s.state),
             f"{s.running_replicas}/{s.target_replicas}", first_line(s.message) or "-"]
            for s in deployment.version_statuses
        ])


def follow_deployment(client: Client, name: str, wait_timeout: float | None, fmt: Format) -> ExitCode:
    """State changes until HEALTHY, then the deployment; exit 8 when --wait-timeout passes."""
    shown: list[str] = []

    def progress(current: deployment_pb2.Deployment) -> None:
        line = _state_line(current)
        if fmt == Format.table and (not shown or shown[-1] != line):
            output.console().print(line, markup=False, highlight=False, soft_wrap=True)
            shown.append(line)

    done = client.exporter.wait_deployment(name, timeout=wait_timeout, on_update=progress, until_healthy=True)
    if fmt != Format.table:
        output.emit(fmt, output.as_data(done))
    else:
        output.console().print(f"serving model_name {done.serving_name!r} at {done.endpoint} (inference.GRPCInferenceService, "
                               f"metadata application: {done.serving_name}) and {done.http_endpoint or '-'} (v2 REST)",
                               markup=False, highlight=False)
    return ExitCode.SUCCEEDED


def _finish(client: Client, deployment: deployment_pb2.Deployment, verb: str, wait: bool, wait_timeout: str,
            fmt: Format) -> None:
    if wait:
        if fmt == Format.table:
            output.console().print(f"{verb} {deployment.name} ({deployment_state(deployment.state)})", markup=False)
        raise typer.Exit(int(follow_deployment(client, deployment.name, _duration(wait_timeout, "--wait-timeout"), fmt)))
    if fmt != Format.table:
        output.emit(fmt, output.as_data(deployment))
        return
    output.console().print(f"{verb} {deployment.name} ({deployment_state(deployment.state)}); "
                           f"follow it with `paddleray deployments get {deployment.name}`", markup=False, soft_wrap=True)


@app.command()
def create(
    ctx: typer.Context,
    deployment_id: str = typer.Argument(..., help="Deployment id: [a-z0-9-], starting with a letter."),
    model: str = typer.Option(..., "--model", help="models/ID or ID"),
    version: int = typer.Option(None, "--version", min=1, help="Serve this version (all the traffic)."),
    traffic: str = TrafficOption,
    serving_name: str = typer.Option("", "--serving-name", help="model_name of v2 calls (default: the deployment id)."),
    replicas: int = ReplicasOption, min_replicas: int = MinReplicasOption, max_replicas: int = MaxReplicasOption,
    target: float = TargetOption, cpus: float = CpusOption, gpus: float = GpusOption,
    max_batch_size: int = BatchOption, batch_wait_ms: float = BatchWaitOption, backend: str = BackendOption,
    threads: int = ThreadsOption,
    wait: bool = WaitOption, wait_timeout: str = DeployWaitTimeoutOption, fmt: Format = OutputOption,
) -> None:
    """Serve a model's version (or a traffic split over several) on Ray Serve."""
    if (version is None) == (traffic is None):
        raise typer.BadParameter("give exactly one of --version and --traffic", param_hint="--version / --traffic")
    percents = {version: 100} if version is not None else parse_traffic(traffic)
    options = serving_options(replicas, min_replicas, max_replicas, target, cpus, gpus, max_batch_size, batch_wait_ms,
                              backend, threads)
    client = session.client(ctx)
    created = client.exporter.create_deployment(deployment_id, new_deployment(model, percents, options, serving_name))
    _finish(client, created, "created", wait, wait_timeout, fmt)


@app.command()
def update(
    ctx: typer.Context,
    name: str = DeploymentArgument,
    traffic: str = TrafficOption,
    replicas: int = ReplicasOption, min_replicas: int = MinReplicasOption, max_replicas: int = MaxReplicasOption,
    target: float = TargetOption, cpus: float = CpusOption, gpus: float = GpusOption,
    max_batch_size: int = BatchOption, batch_wait_ms: float = BatchWaitOption, backend: str = BackendOption,
    threads: int = ThreadsOption,
    wait: bool = WaitOption, wait_timeout: str = DeployWaitTimeoutOption, fmt: Format = OutputOption,
) -> None:
    """Change a deployment's traffic split or serving options (only those given); rolls out
    without failing requests."""
    percents = parse_traffic(traffic) if traffic is not None else None
    options = serving_options(replicas, min_replicas, max_replicas, target, cpus, gpus, max_batch_size, batch_wait_ms,
                              backend, threads)
    if percents is None and options == ServingOptions():
        raise typer.BadParameter("nothing to change: give --traffic or a serving option (--replicas, --cpus, ...)",
                                 param_hint="--traffic")
    client = session.client(ctx)
    updated = client.exporter.update_deployment(name, traffic=percents, options=options)
    _finish(client, updated, "updating", wait, wait_timeout, fmt)


@app.command(name="list")
def list_deployments(
    ctx: typer.Context, model: str = typer.Option("", "--model", help="Only those serving this model."),
    limit: int = typer.Option(50, min=1), fmt: Format = OutputOption,
) -> None:
    """List deployments, newest first."""
    found = list(session.client(ctx).exporter.list_deployments(model=model, limit=limit))
    if fmt != Format.table:
        output.emit(fmt, [output.as_data(d) for d in found])
        return
    rows = [[d.name, deployment_state(d.state), d.serving_name, d.model, traffic_text(d), replicas_text(d),
             d.endpoint or "-", d.http_endpoint or "-"] for d in found]
    output.table(("deployment", "state", "model_name", "model", "traffic", "replicas", "endpoint", "REST"), rows,
                 keep=(0, 1, 2))


@app.command()
def get(ctx: typer.Context, name: str = DeploymentArgument, fmt: Format = OutputOption) -> None:
    """Show a deployment: what it serves, its live state and replicas per version."""
    deployment = session.client(ctx).exporter.get_deployment(name)
    if fmt != Format.table:
        output.emit(fmt, output.as_data(deployment))
        return
    print_deployment(deployment)


@app.command()
def delete(
    ctx: typer.Context, name: str = DeploymentArgument,
    wait: bool = typer.Option(False, "--wait", help="Wait until its replicas stopped and it is gone."),
    wait_timeout: str = DeployWaitTimeoutOption,
) -> None:
    """Stop serving a deployment."""
    client = session.client(ctx)
    deleting = client.exporter.delete_deployment(name)
    out = output.console()
    if not wait:
        out.print(f"{deleting.name}: {deployment_state(deleting.state)}", markup=False)
        return
    client.exporter.wait_deleted(name, timeout=_duration(wait_timeout, "--wait-timeout"))
    out.print(f"{deployment_name(name)} deleted", markup=False)
