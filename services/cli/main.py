"""The `paddleray` command: local stack and demo."""

from __future__ import annotations

import typer

from paddleray.services.cli import demo, jobs_commands, stack_commands

app = typer.Typer(help="paddleray: PaddlePaddle training on Ray, behind gRPC services.", no_args_is_help=True)
app.command()(stack_commands.up)
app.command()(stack_commands.down)
app.command()(stack_commands.status)
app.command(name="demo")(demo.demo)
app.add_typer(jobs_commands.app, name="jobs")


if __name__ == "__main__":
    app()
