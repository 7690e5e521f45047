"""The complete training function of docs/context.md, copied from the page into a project of
its own, uploaded by `paddleray submit` (working_dir) and trained on 2 ranks, then fine-tuned
from that job with init_from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from paddleray.services.cli.output import ExitCode

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
DOC = Path(__file__).parents[3] / "docs" / "context.md"


def _code_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_documented_training_function_trains_uploaded_on_two_ranks_and_fine_tunes(cli, tmp_path):
    project = tmp_path / "project"
    (project / "my_project").mkdir(parents=True)
    (project / "my_project" / "__init__.py").write_text("")
    (project / "my_project" / "train_digits.py").write_text(_code_blocks("python")[0])
    spec = project / "job.yaml"
    spec.write_text(_code_blocks("yaml")[0].replace("epochs: 5", "epochs: 2"))
    first = cli("submit", str(spec), "--watch")
    assert first.exit_code == ExitCode.SUCCEEDED, first.stdout + first.stderr
    baseline = first.stdout.split()[1]
    logs = cli("logs", baseline)
    assert "rank 0/2" in logs.stdout and "rank 1/2" in logs.stdout, logs.stdout

    spec.write_text(spec.read_text().replace("# init_from: jobs/<baseline-job-id>", f"init_from: {baseline}")
                    .replace("num_workers: 2", "num_workers: 1"))
    tuned = cli("submit", str(spec), "--watch")
    assert tuned.exit_code == ExitCode.SUCCEEDED, tuned.stdout + tuned.stderr
    shown = cli("jobs", "get", tuned.stdout.split()[1], "-o", "json")
    assert '"init_from"' in shown.stdout and baseline in shown.stdout
