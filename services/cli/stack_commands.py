"""`paddleray up | down | status`: the local stack."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from paddleray.services.cli.output import ExitCode, Format, OutputOption, emit
from paddleray.services.localstack import stack
from paddleray.services.localstack.redis_process import redis_reachable

console = Console()

StateDir = typer.Option(stack.DEFAULT_STATE_DIR, "--state-dir", help="Where the stack keeps its state file, logs and storage.")


def up(
    state_dir: Path = StateDir,
    redis_url: str | None = typer.Option(
        None, envvar="REDIS_URL", help="Redis to use (it must answer); unset: the stack starts a redis-server of its own."
    ),
    num_cpus: int = typer.Option(0, help="CPUs of the local Ray head (0: all)."),
) -> None:
    """Start Redis, a local Ray head and the three services in the background."""
    with console.status("starting Redis, Ray and the services ..."):
        state = stack.up(state_dir, redis_url=redis_url, num_cpus=num_cpus or None)
    show(state)
    console.print(f"state file: {stack.state_file(Path(state.state_dir))}   stop with: [bold]paddleray down[/bold]")


def down(state_dir: Path = StateDir) -> None:
    """Stop everything `paddleray up` started."""
    if stack.down(state_dir):
        console.print("stack stopped")
    else:
        console.print("no stack running")


def status(state_dir: Path = StateDir, fmt: Format = OutputOption) -> None:
    """Show the stack's parts and their health (exit code 7 when it is not all up)."""
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
        healthy = redis_reachable(state.redis_url) and all(p["serving"] for p in parts.values())
        emit(fmt, {"running": True, "healthy": healthy, "redis": state.redis_url, "ray": state.ray_address,
                   "services": parts})
    elif not show(state):
        healthy = False
    else:
        healthy = True
    if not healthy:
        raise typer.Exit(int(ExitCode.UNREACHABLE))


def show(state: stack.StackState) -> bool:
    table = Table(title="paddleray local stack")
    for column in ("part", "address", "health", "log"):
        table.add_column(column)
    healthy = True
    redis_ok = redis_reachable(state.redis_url)
    healthy &= redis_ok
    origin = "given (REDIS_URL / --redis-url)" if state.redis_pid is None else "own (started by the stack)"
    table.add_row("redis", stack.redact_url(state.redis_url), "PONG" if redis_ok else "unreachable", origin)
    table.add_row("ray head", state.ray_address, "", str(Path(state.state_dir) / "ray.log"))
    for process in state.services.values():
        ok = state.serving(process.name)
        healthy &= ok
        table.add_row(process.name, process.address, "SERVING" if ok else "NOT SERVING", process.log_file)
    console.print(table)
    return healthy
