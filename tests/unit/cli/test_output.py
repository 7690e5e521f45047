"""What the CLI prints is printed verbatim: service messages hold brackets that rich would take
for markup."""

from __future__ import annotations

import pytest
import typer

from paddleray.services.cli import output

pytestmark = pytest.mark.unit
RULE = "job_id: must match [a-z][a-z0-9-]{0,62} and not end with '-' [bold]x[/bold]"


def test_an_error_line_keeps_its_brackets(capsys):
    exit_ = output.fail(RULE, output.ExitCode.USAGE)
    assert isinstance(exit_, typer.Exit) and exit_.exit_code == output.ExitCode.USAGE
    assert capsys.readouterr().err.strip() == f"error: {RULE}"


def test_tables_and_lines_keep_their_brackets(capsys):
    output.table(("job", "reason"), [["jobs/a", RULE]])
    output.console().print(RULE)
    out = capsys.readouterr().out
    assert out.count("[a-z][a-z0-9-]{0,62}") == 2 and out.count("[bold]x[/bold]") == 2
