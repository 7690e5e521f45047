"""How the CLI prints: tables for people, plain columns for pipes, JSON/YAML for scripts, and
exit codes a script can branch on."""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence

import grpc
import typer
import yaml
from google.protobuf import json_format
from google.protobuf.message import Message
from rich.console import Console
from rich.table import Table
from rich.text import Text

from paddleray.scheduler.v1 import job_pb2
from paddleray.services.client import ClientError, NotConfigured, ServiceError, Unreachable, WaitTimeout
from paddleray.services.common import structs


class ExitCode(enum.IntEnum):
    """The `paddleray` exit codes (docs/cli.md): one per way a job or a call can end."""

    SUCCEEDED = 0
    FAILED = 1
    USAGE = 2          # bad arguments, a malformed spec or config file, INVALID_ARGUMENT
    CANCELLED = 3
    TIMED_OUT = 4      # the job hit its own timeout
    EARLY_STOPPED = 5  # a sweep trial stopped by the experiment's early-stopping policy
    REJECTED = 6       # the service refused the call: NOT_FOUND, PERMISSION_DENIED, ...
    UNREACHABLE = 7    # no address configured, or the service did not answer
    WAIT_TIMEOUT = 8   # --wait-timeout passed; the job is still running


_JOB_EXIT: dict[int, ExitCode] = {
    job_pb2.JOB_STATE_SUCCEEDED: ExitCode.SUCCEEDED,
    job_pb2.JOB_STATE_FAILED: ExitCode.FAILED,
    job_pb2.JOB_STATE_CANCELLED: ExitCode.CANCELLED,
    job_pb2.JOB_STATE_TIMED_OUT: ExitCode.TIMED_OUT,
    job_pb2.JOB_STATE_EARLY_STOPPED: ExitCode.EARLY_STOPPED,
}


def job_exit_code(state: int) -> ExitCode:
    return _JOB_EXIT.get(state, ExitCode.WAIT_TIMEOUT)


class Format(enum.StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


OutputOption = typer.Option(Format.table, "--output", "-o", help="table, json or yaml.", case_sensitive=False)


def console() -> Console:
    # Made per call: tests and pipes swap sys.stdout, and a terminal's width can change. No markup:
    # what is printed (names, reasons, the services' messages) is printed verbatim; rich would
    # take `[a-z]` in `must match [a-z][a-z0-9-]{0,62}` for a tag and drop it.
    return Console(highlight=False, soft_wrap=False, markup=False)


def err_console() -> Console:
    return Console(stderr=True, highlight=False, markup=False)


def as_data(message: Message) -> dict:
    """A proto as JSON-like data (field names as in the .proto), integral numbers as ints."""
    return structs.integral(json_format.MessageToDict(message, preserving_proto_field_name=True))


def emit(fmt: Format, data) -> None:
    """Prints data (a dict or a list of dicts) as JSON or YAML, nothing else on stdout."""
    if fmt == Format.json:
        typer.echo(json.dumps(data, indent=2, sort_keys=False))
    else:
        typer.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip())


def emit_item(fmt: Format, data) -> None:
    """One item of a stream: a JSON line (JSON Lines), or a YAML document."""
    if fmt == Format.json:
        typer.echo(json.dumps(data, separators=(",", ":")))
    else:
        typer.echo("---\n" + yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip())


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], title: str = "", keep: Sequence[int] = (0,)) -> None:
    """A table: rich on a terminal (the `keep` columns never cut), aligned plain text in a pipe."""
    out = console()
    if not out.is_terminal:
        widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
        for row in [[h.upper() for h in headers], *rows]:
            typer.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        return
    shown = Table(title=title or None)
    for index, header in enumerate(headers):
        if index in keep:
            width = max([len(header), *(len(r[index]) for r in rows)])
            shown.add_column(header, no_wrap=True, min_width=width)
        else:
            shown.add_column(header, overflow="fold")
    for row in rows:
        shown.add_row(*row)
    out.print(shown)


def pairs(rows: Sequence[tuple[str, str]]) -> None:
    """One resource as aligned `key  value` lines (values wrap, never cut)."""
    out = console()
    width = max(len(key) for key, _ in rows)
    for key, value in rows:
        out.print(f"{key.ljust(width)}  {value}", markup=False, highlight=False, soft_wrap=True)


def fail(message: str, code: ExitCode) -> typer.Exit:
    err_console().print(Text.assemble(("error:", "red"), " ", message), soft_wrap=True)
    return typer.Exit(int(code))


def exit_for(error: ClientError) -> typer.Exit:
    """One line on stderr and the exit code for an SDK error."""
    if isinstance(error, Unreachable):
        return fail(str(error), ExitCode.UNREACHABLE)
    if isinstance(error, WaitTimeout):
        return fail(str(error), ExitCode.WAIT_TIMEOUT)
    if isinstance(error, ServiceError):
        code = ExitCode.USAGE if error.code == grpc.StatusCode.INVALID_ARGUMENT else ExitCode.REJECTED
        return fail(str(error), code)
    if isinstance(error, NotConfigured):
        return fail(str(error), ExitCode.UNREACHABLE)
    # A malformed spec or config file.
    return fail(str(error), ExitCode.USAGE)
