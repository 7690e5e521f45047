"""`paddleray up | down | status`: the local stack."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from paddleray.services.cli.output import ExitCode, Format, OutputOption, emit, fail
from paddleray.services.localstack import stack
from paddleray.services.localstack.ports import pid_alive
from paddleray.services.localstack.redis_process import redis_reachable

console = Console()

StateDir = typer.Option(stack.DEFAULT_STATE_DIR, "--state-dir", help="Where the stack keeps its state file, logs and storage.")
RedisTlsCaFile = typer.Option(None, envvar="REDIS_TLS_CA_FILE", help="CA of a rediss:// Redis of --redis-url.")


def up(
    state_dir: Path = StateDir,
    redis_url: str | None = typer.Option(
        None, envvar="REDIS_URL", help="Redis to use (it must answer); unset: the stack starts a redis-server of its own."
    ),
    redis_password: str | None = typer.Option(
        None, envvar="REDIS_PASSWORD", help="Password of the Redis of --redis-url, passed to the services as a "
        "setting of its own (kept out of URLs and of the stack's files)."
    ),
    redis_tls_ca_file: Path | None = RedisTlsCaFile,
    num_cpus: int = typer.Option(0, help="CPUs of the local Ray head, or of each worker node with --nodes (0: all, "
                                 "shared out among the nodes)."),
    nodes: int = typer.Option(0, min=0, help="Worker nodes besides the head, each a raylet of its own on this host "
                              "(the head then runs no training); 0: one head that does everything."),
    storage_root: str | None = typer.Option(
        None, help="Storage root of checkpoints and logs: a directory, or an object store such as s3://bucket/prefix "
        "(credentials from the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL; "
        "docs/storage.md); unset: the state directory's storage/."),
) -> None:
    """Start Redis, a local Ray cluster and the three services in the background."""
    try:
        with console.status("starting Redis, Ray and the services ..."):
            state = stack.up(state_dir, redis_url=redis_url, num_cpus=num_cpus or None, redis_password=redis_password,
                             redis_tls_ca_file=redis_tls_ca_file, nodes=nodes, storage_root=storage_root)
    except stack.StartUpFailed as error:
        raise fail(str(error), ExitCode.UNREACHABLE) from None
    except ValueError as error:  # a bad --storage-root, before anything started
        raise fail(f"--storage-root: {error}", ExitCode.USAGE) from None
    show(state)
    console.print(f"state file: {stack.state_file(Path(state.state_dir))}   stop with: [bold]paddleray down[/bold]")


def down(state_dir: Path = StateDir) -> None:
    """Stop everything `paddleray up` started."""
    if stack.down(state_dir):
        console.print("stack stopped")
    else:
        console.print("no stack running")


StatusStateDir = typer.Option(None, "--state-dir", help="The stack's state dir (default: --stack-dir, the context's "
                              "state_dir, else .paddleray/stack here or in a parent).")


def status(ctx: typer.Context, state_dir: Path = StatusStateDir, fmt: Format = OutputOption) -> None:
    """Show the stack's parts and their health (exit code 7 when it is not all up)."""
    state_dir = state_dir or _stack_dir(ctx)
    state = stack.StackState.load(state_dir)
    if state is None:
        if fmt != Format.table:
            emit(fmt, {"running": False})
        else:
            console.print("no stack running (start it with: paddleray up)")
        raise typer.Exit(int(ExitCode.UNREACHABLE))
    if fmt != Format.table:
        parts = {name: {"address": p.address, "serving": state.serving(name), "log": p.log_file}
                 for name, p in state.services.items()}
        healthy = _redis_ok(state) and all(p["serving"] for p in parts.values())
        nodes = {n.name: {"pid": n.pid, "num_cpus": n.num_cpus, "running": pid_alive(n.pid), "log": n.log_file}
                 for n in state.ray_nodes}
        healthy = healthy and all(n["running"] for n in nodes.values())
        emit(fmt, {"running": True, "healthy": healthy, "redis": state.redis_url, "ray": state.ray_address,
                   "ray_nodes": nodes, "services": parts})
    elif not show(state):
        healthy = False
    else:
        healthy = True
    if not healthy:
        raise typer.Exit(int(ExitCode.UNREACHABLE))


def _stack_dir(ctx: typer.Context) -> Path:
    """The stack the other commands would use: --stack-dir, else the context's state_dir, else
    the nearest .paddleray/stack from here up, else ./.paddleray/stack."""
    from paddleray.services.client.config import context_state_dir, find_state_file

    session = ctx.find_root().obj
    if session is not None and session.state_dir:
        return Path(session.state_dir)
    configured = context_state_dir(getattr(session, "context", None), getattr(session, "config_file", None))
    if configured is not None:
        return configured
    found = find_state_file(Path.cwd().resolve())
    return found.parent if found is not None else stack.DEFAULT_STATE_DIR


def show(state: stack.StackState) -> bool:
    table = Table(title="paddleray local stack")
    for column in ("part", "address", "health", "log"):
        table.add_column(column)
    healthy = True
    redis_ok = _redis_ok(state)
    healthy &= redis_ok
    origin = "given (REDIS_URL / --redis-url)" if state.redis_pid is None else "own (started by the stack)"
    table.add_row("redis", stack.redact_url(state.redis_url), "PONG" if redis_ok else "unreachable", origin)
    head_log = Path(state.state_dir) / ("ray/head.log" if state.ray_nodes else "ray.log")
    table.add_row("ray head", state.ray_address, "", str(head_log))
    for node in state.ray_nodes:
        alive = pid_alive(node.pid)
        healthy &= alive
        table.add_row(f"ray {node.name}", f"{node.num_cpus} CPU", "running" if alive else "DEAD", node.log_file)
    for process in state.services.values():
        ok = state.serving(process.name)
        healthy &= ok
        table.add_row(process.name, process.address, "SERVING" if ok else "NOT SERVING", process.log_file)
    console.print(table)
    return healthy


def _redis_ok(state: stack.StackState) -> bool:
    # A password-protected Redis is checked with the password `paddleray up` was given.
    return redis_reachable(state.redis(os.environ.get("REDIS_PASSWORD")))
