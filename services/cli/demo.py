"""`paddleray demo`: the README's main command: the whole local stack, started for you."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from paddleray.services.cli.stack_commands import StateDir, show
from paddleray.services.localstack import stack

console = Console()


def demo(
    state_dir: Path = StateDir,
    keep: bool = typer.Option(False, help="Leave the stack running afterwards."),
) -> None:
    """Start Redis, Ray and the three services, show them healthy, then stop them."""
    with console.status("starting Redis, a local Ray head and the three services ..."):
        state = stack.up(state_dir)
    try:
        if not show(state):
            raise typer.Exit(1)
    finally:
        if not keep:
            stack.down(state_dir)
            console.print("stack stopped (use --keep to leave it running)")
