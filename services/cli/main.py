"""The `paddleray` command: connection options, then the command groups.

Connection options come first (`paddleray --address HOST:PORT jobs list`) or from the
environment / config file / local stack (services/client/config.py). Exit codes: output.ExitCode.
"""

from __future__ import annotations

from pathlib import Path

import typer
from typer.core import TyperGroup

from paddleray.services.cli import (
    demo,
    deployments_commands,
    experiments_commands,
    jobs_commands,
    models_commands,
    output,
    predict_command,
    stack_commands,
)
from paddleray.services.cli.session import Session
from paddleray.services.client import ClientError


class _Group(TyperGroup):
    """Every command's SDK errors end as one line on stderr and a distinct exit code, never a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except ClientError as error:
            raise output.exit_for(error) from None


app = typer.Typer(
    # Plain click errors: a usage mistake is one "Error: ..." line naming the option, not a box.
    cls=_Group, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
    help="paddleray: PaddlePaddle training on Ray, behind gRPC services.",
)


ConfigFileOption = typer.Option(
    None, "--config-file", envvar="PADDLERAY_CONFIG", help="Config file (default ~/.config/paddleray/config.yaml)."
)
StackDirOption = typer.Option(
    None, "--stack-dir", help="A local stack's state dir (default: .paddleray/stack here or in a parent)."
)


@app.callback()
def connection(
    ctx: typer.Context,
    address: str = typer.Option(None, "--address", envvar="PADDLERAY_ADDRESS", help="Scheduler host:port."),
    exporter_address: str = typer.Option(
        None, "--exporter-address", envvar="PADDLERAY_EXPORTER_ADDRESS", help="Exporter host:port (default: --address)."),
    inference_address: str = typer.Option(
        None, "--inference-address", envvar="PADDLERAY_INFERENCE_ADDRESS",
        help="v2 inference host:port (default: the endpoint of the deployment serving the model)."),
    token: str = typer.Option(None, "--token", envvar="PADDLERAY_TOKEN", help="Bearer token, when the services require one."),
    tls_ca: str = typer.Option(None, "--tls-ca", envvar="PADDLERAY_TLS_CA", help="PEM CA file: use TLS."),
    tls_cert: str = typer.Option(None, "--tls-cert", envvar="PADDLERAY_TLS_CERT", help="PEM client certificate (mTLS)."),
    tls_key: str = typer.Option(None, "--tls-key", envvar="PADDLERAY_TLS_KEY", help="PEM client key (mTLS)."),
    context: str = typer.Option(None, "--context", envvar="PADDLERAY_CONTEXT", help="Context of the config file."),
    config_file: Path = ConfigFileOption,
    state_dir: Path = StackDirOption,
    timeout: float = typer.Option(30.0, "--request-timeout", min=0.1, help="Deadline of each call, seconds."),
) -> None:
    ctx.obj = Session(
        address=address, exporter_address=exporter_address, inference_address=inference_address, token=token,
        tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, context=context, config_file=config_file, state_dir=state_dir, timeout=timeout,
    )


app.command()(stack_commands.up)
app.command()(stack_commands.down)
app.command()(stack_commands.status)
app.command(name="demo")(demo.demo)
app.command(name="submit")(jobs_commands.submit_file)
app.command(name="watch")(jobs_commands.watch_any)
app.command(name="logs")(jobs_commands.logs)
app.command(name="sweep")(experiments_commands.sweep)
app.add_typer(jobs_commands.app, name="jobs")
app.add_typer(experiments_commands.app, name="experiments")
app.add_typer(models_commands.app, name="models")
app.add_typer(deployments_commands.app, name="deployments")
app.command(name="predict")(predict_command.predict)
# Top-level shortcuts of the two commands of the serving path, as `submit` and `logs` are for jobs.
app.command(name="export")(models_commands.export)
app.command(name="deploy")(deployments_commands.create)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
