"""`paddleray submit | watch | logs | jobs ...` against a real stack: exit codes, output forms,
and the defects a new user hit (tracebacks, exit 0 on FAILED, cut ids)."""

from __future__ import annotations

import json

import pytest
import yaml

from paddleray.services.cli.output import ExitCode
from support.cli import job_spec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
MLP = "paddleray.services.trainer.examples.digits_mlp:train"


def _created(result) -> str:
    line = next(line for line in result.stdout.splitlines() if line.startswith("created "))
    return line.split()[1]


def test_submit_spec_watch_succeeds_and_user_code_gets_integers(cli, tmp_path):
    spec = job_spec(tmp_path, "typed", {"epochs": 2, "hidden_sizes": [128], "lr": 0.5})
    result = cli("submit", str(spec), "--watch")
    assert result.exit_code == ExitCode.SUCCEEDED, result.stdout + result.stderr
    name = _created(result)
    assert f"{name} ended SUCCEEDED" in result.stdout
    assert "epoch 2/2 step 2" in result.stdout  # live progress, one plain line per event in a pipe
    logs = cli("logs", name)
    assert logs.exit_code == 0, logs.stderr
    assert "'epochs': 'int'" in logs.stdout and "'lr': 'float'" in logs.stdout
    assert "hidden[0] type: int" in logs.stdout
    live = cli("watch", name, env={"TTY_COMPATIBLE": "1", "COLUMNS": "160"})  # a terminal: a progress bar
    assert live.exit_code == 0 and "100%" in live.stdout and "epoch 2/2 step 2" in live.stdout, live.stdout
    shown = cli("jobs", "get", name)
    assert '"hidden_sizes": [128]' in shown.stdout and "128.0" not in shown.stdout


def test_watch_exits_nonzero_when_the_job_failed(cli, tmp_path):
    result = cli("submit", str(job_spec(tmp_path, "fail", {})), "--watch")
    assert result.exit_code == ExitCode.FAILED, result.stdout + result.stderr
    name = _created(result)
    assert "ended FAILED" in result.stdout and "fails on purpose" in result.stdout
    again = cli("jobs", "watch", name)
    assert again.exit_code == ExitCode.FAILED
    top = cli("watch", name.removeprefix("jobs/"))
    assert top.exit_code == ExitCode.FAILED


def test_jobs_submit_watch_exit_code_by_state(cli):
    ok = cli("jobs", "submit", MLP, "--config", '{"epochs": 1, "hidden_sizes": [8]}', "--watch")
    assert ok.exit_code == ExitCode.SUCCEEDED, ok.stdout + ok.stderr
    bad = cli("jobs", "submit", MLP, "--config", '{"epochs": 1, "optimizer": "nope"}', "--watch")
    assert bad.exit_code == ExitCode.FAILED, bad.stdout + bad.stderr


def test_job_timeout_and_cancel_and_wait_timeout_have_their_exit_codes(cli, tmp_path):
    timed = cli("submit", str(job_spec(tmp_path, "slow", {"sleep_s": 0.5}, timeout="3s")), "--watch")
    assert timed.exit_code == ExitCode.TIMED_OUT, timed.stdout + timed.stderr

    started = cli("submit", str(job_spec(tmp_path, "slow", {"sleep_s": 0.5})))
    name = _created(started)
    waited = cli("watch", name, "--wait-timeout", "1")
    assert waited.exit_code == ExitCode.WAIT_TIMEOUT, waited.stdout + waited.stderr
    assert "still running" in waited.stderr
    cancelled = cli("jobs", "cancel", name)
    assert cancelled.exit_code == 0 and "CANCELLED" in cancelled.stdout
    assert cli("jobs", "watch", name).exit_code == ExitCode.CANCELLED


@pytest.mark.parametrize("args, field", [
    (["jobs", "submit", MLP, "--config", "{epochs: 3"], "--config"),
    (["jobs", "submit", MLP, "--config", "[1, 2]"], "--config"),
    (["jobs", "submit", MLP, "--timeout", "nan"], "--timeout"),
    (["jobs", "submit", MLP, "--cpus", "inf"], "--cpus"),
    (["jobs", "list", "--page-size", "100000"], "--page-size"),
    (["jobs", "list", "--state", "DONE"], "--state"),
])
def test_ordinary_mistakes_give_one_line_and_no_traceback(cli, args, field):
    result = cli(*args)
    assert result.exit_code == ExitCode.USAGE, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert field in result.stderr


def test_a_spec_rejected_by_the_service_names_the_field(cli, tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("entrypoint: not-a-module\n")
    result = cli("submit", str(spec))
    assert result.exit_code == ExitCode.USAGE, result.stdout + result.stderr
    assert "spec.entrypoint" in result.stderr and "Traceback" not in result.stderr


def test_malformed_spec_files_name_file_and_line(cli, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("entrypoint: a.b:c\nnum_workers: 2\nresources:\n  cpus: lots\n")
    result = cli("submit", str(spec))
    assert result.exit_code == ExitCode.USAGE
    assert result.stderr.strip().splitlines() == [
        f"error: {spec}:4: resources.cpus: Input should be a valid number, unable to parse string as a number"
    ]
    spec.write_text("entrypoint: a.b:c\nconfig: {epochs: 3\n")
    broken = cli("submit", str(spec))
    assert broken.exit_code == ExitCode.USAGE and f"{spec}:3: not valid YAML" in broken.stderr
    missing = cli("submit", str(tmp_path / "nope.yaml"))
    assert missing.exit_code == ExitCode.USAGE and "cannot read" in missing.stderr


def test_list_never_cuts_ids_and_pipes_get_plain_text(cli, tmp_path):
    spec = job_spec(tmp_path, "typed", {"epochs": 1, "hidden_sizes": [4]}, name="a-job-id-long-enough-to-be-cut-in-80-columns")
    created = cli("submit", str(spec))
    assert created.exit_code == 0, created.stderr
    piped = cli("jobs", "list", env={"COLUMNS": "80"})
    assert piped.exit_code == 0
    assert "jobs/a-job-id-long-enough-to-be-cut-in-80-columns" in piped.stdout
    assert not set("│┃━─…") & set(piped.stdout), piped.stdout  # no box drawing, no ellipsis
    assert piped.stdout.splitlines()[0].split()[:2] == ["JOB", "STATE"]
    terminal = cli("jobs", "list", env={"COLUMNS": "80", "FORCE_COLOR": "1", "TTY_COMPATIBLE": "1"})
    assert "┃" in terminal.stdout  # a rich table this time
    assert "jobs/a-job-id-long-enough-to-be-cut-in-80-columns" in terminal.stdout, terminal.stdout


def test_read_commands_speak_json_and_yaml(cli):
    listed = json.loads(cli("jobs", "list", "-o", "json", "--limit", "3").stdout)
    assert 1 <= len(listed) <= 3 and all(job["name"].startswith("jobs/") for job in listed)
    name = listed[0]["name"]
    as_json = json.loads(cli("jobs", "get", name, "--output", "json").stdout)
    as_yaml = yaml.safe_load(cli("jobs", "get", name, "-o", "yaml").stdout)
    assert as_json["name"] == as_yaml["name"] == name
    assert as_json["state"] == as_yaml["state"]
    assert as_json["spec"]["config"] == as_yaml["spec"]["config"]


def test_logs_tail_rank_and_follow(cli, tmp_path):
    result = cli("submit", str(job_spec(tmp_path, "slow", {"epochs": 4, "sleep_s": 0.2})))
    name = _created(result)
    followed = cli("logs", name, "-f")
    assert followed.exit_code == 0, followed.stderr
    assert [line for line in followed.stdout.splitlines() if "slow epoch" in line] == [
        f"[rank 0] slow epoch {n}" for n in range(1, 5)
    ]
    tail = cli("jobs", "logs", name, "--tail", "1", "--rank", "0")
    assert tail.stdout.strip().splitlines()[-1] == "[rank 0] slow epoch 4"
    as_lines = [json.loads(line) for line in cli("logs", name, "-o", "json").stdout.splitlines()]
    assert [r["text"] for r in as_lines if r["text"].startswith("slow epoch")] == [f"slow epoch {n}" for n in range(1, 5)]
    # rank 0 is there too (proto JSON would drop it), and each line has its number, as a number.
    assert all(r["rank"] == 0 for r in as_lines) and [r["sequence"] for r in as_lines] == list(range(1, len(as_lines) + 1))
    watched = cli("jobs", "watch", name, "-o", "json")
    assert watched.exit_code == 0
    records = [json.loads(line) for line in watched.stdout.splitlines()]
    assert [int(r["sequence"]) for r in records[:-1]] == list(range(1, len(records)))
    assert records[-1]["name"] == name and records[-1]["state"] == "JOB_STATE_SUCCEEDED"


def test_unknown_job_is_rejected_with_its_own_exit_code(cli):
    result = cli("jobs", "get", "jobs/no-such-job")
    assert result.exit_code == ExitCode.REJECTED
    assert result.stderr.startswith("error: NOT_FOUND")


def test_logs_of_a_job_that_never_started_and_a_list_cut_by_its_limit_say_so(cli, tmp_path):
    queued = cli("submit", str(job_spec(tmp_path, "typed", {"epochs": 1}, resources={"cpus": 1, "custom": {"nowhere": 1}})))
    name = _created(queued)
    try:
        logs = cli("logs", name)
        assert logs.exit_code == 0 and logs.stdout == ""
        assert f"{name} has not started yet (" in logs.stderr and "): it has no logs" in logs.stderr, \
            cli("jobs", "get", name, "-o", "json").stdout
        listed = cli("jobs", "list", "--limit", "1")
        assert listed.exit_code == 0 and len(listed.stdout.strip().splitlines()) == 2  # header + 1 row
        assert "showing the newest 1 jobs; there are more (raise --limit)" in listed.stderr
        assert "there are more" not in cli("jobs", "list", "--limit", "100000").stderr
    finally:
        cli("jobs", "cancel", name)
