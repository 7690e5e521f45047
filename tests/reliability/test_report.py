"""The report generator: what it writes from a results file, and that every fault-injection
test it cites still exists."""

from __future__ import annotations

import json

from reliability import report


def _results(failures=()):
    """A fuzz results file's contents."""
    rows = [{"service": "scheduler", "method": "CreateJob", "kind": "message", "code": "INVALID_ARGUMENT", "count": 7},
            {"service": "scheduler", "method": "CreateJob", "kind": "garbage", "code": "INVALID_ARGUMENT", "count": 3},
            {"service": "trainer", "method": "GetRun", "kind": "message", "code": "NOT_FOUND", "count": 5}]
    return {"profile": "soak", "commit": "abc1234", "started": 0, "duration_s": 1.0, "requests": rows,
            "failures": list(failures), "failure_count": len(failures)}


def test_every_cited_fault_injection_test_exists():
    assert report.check_fault_tests() == []


def test_counts_by_service_code_and_kind(tmp_path):
    results = tmp_path / "fuzz.json"
    results.write_text(json.dumps(_results()))
    out = tmp_path / "reliability.md"
    assert report.main(["--results", str(results), "--results-dir", str(tmp_path / "none"), "--out", str(out)]) == 0
    text = out.read_text()
    assert "15 requests, 0 answered INTERNAL or UNKNOWN, 0 failed checks" in text
    assert "| scheduler | 10 | 10 | 0 |" in text  # codes by name: INVALID_ARGUMENT, NOT_FOUND
    assert "| scheduler | 7 | 0 | 3 | 0 |" in text  # message, mutation, garbage, oversized
    assert "test_sigkill_mid_sweep_loses_and_duplicates_no_trial" in text


def test_failures_are_listed():
    failure = {"service": "trainer", "method": "StartRun", "kind": "message", "problem": "answered INTERNAL",
               "request": "spec { config | x }"}
    text = report.render(_results([failure]))
    assert "| trainer | StartRun | message | answered INTERNAL | `spec { config \\| x }` |" in text


def test_a_missing_results_file_says_how_to_make_it(tmp_path, capsys):
    assert report.main(["--results", str(tmp_path / "none.json"), "--out", str(tmp_path / "x.md")]) == 2
    assert "PADDLERAY_SOAK=1" in capsys.readouterr().err


def _load(jobs=10_000):
    return {"commit": "abc1234", "recorded": 0, "jobs": jobs, "in_flight": 32, "profile": "soak",
            "create": {"per_s": 812, "p50_ms": 35.2, "p99_ms": 88.0, "seconds": 12.3},
            "cancel": {"per_s": 950, "p50_ms": 30.1, "p99_ms": 70.4, "seconds": 10.5},
            "pagination": {"seconds": 1.1, "pages": 21, "page_size": 500}, "redis_bytes_per_queued_job": 6464}


def _cells(*cells):
    return {"service": "scheduler", "matrices": {"JobService": {"commit": "abc1234", "recorded": 0, "cells": [
        {"rpc": rpc, "caller": caller, "expected": want, "got": got} for rpc, caller, want, got in cells]}}}


def test_load_figures_are_rendered_and_a_smaller_run_says_it_is_the_ci_size():
    text = report.render(_results(), load=_load())
    assert "| CreateJob | 10,000 | 812 | 35.2 | 88.0 | 12.3 |" in text
    assert "| ListJobs, every page (500 per page, BASIC view) | 21 pages |" in text
    assert "Redis memory per queued job: 6,464 bytes" in text
    assert "CI size" not in text and "CI runs 2,000; soak mode" in text
    assert "This is the CI size" in report.render(_results(), load=_load(jobs=2_000))
    assert "## Load: jobs created, paginated, cancelled\n\nNot run" in report.render(_results())


def test_fault_figures_are_shown_per_test_and_the_rest_is_not_run():
    name = "test_sigkill_mid_sweep_loses_and_duplicates_no_trial"
    faults = {name: {"commit": "abc1234", "test": name, "figures": {
        "faults_injected": 2, "trials_submitted": 10, "trials_lost": 0, "trials_duplicated": 0,
        "restart_to_answering_s": 1.42}}}
    text = report.render(_results(), faults=faults)
    row = next(line for line in text.splitlines() if f"::{name}`" in line)
    assert row.endswith("| faults injected: 2; trials submitted: 10; trials lost: 0; trials duplicated: 0; "
                        "restart to answering: 1.42 s (`abc1234`) |")
    assert f"Recorded: 1 of {len(report.FAULT_TESTS)} tests; 2 faults injected, 0 jobs, trials or epochs lost, " \
           "0 duplicated." in text
    others = [line for line in text.splitlines() if line.startswith("| `tests/") and f"::{name}`" not in line]
    assert len(others) == len(report.FAULT_TESTS) - 1
    recording = report.recording_tests()
    assert name in recording and "test_a_wrong_redis_password_is_unavailable_and_not_serving" not in recording
    for line in others:  # recorders without results are "not run"; tests that keep no figures say so
        test = next(t for t in report.FAULT_TESTS if f"::{t.name}`" in line)
        assert line.endswith("| not run |" if test.name in recording else "| asserts only |"), line


def test_the_auth_matrix_counts_rejections_and_fails_a_cell_that_got_through():
    good = _cells(("GetJob", "no-token", "UNAUTHENTICATED", "UNAUTHENTICATED"),
                  ("GetJob", "member-b", "NOT_FOUND", "NOT_FOUND"), ("GetJob", "admin", "OK", "OK"))
    text = report.render(_results(), auth={"scheduler": good})
    assert "| scheduler | 3 | 2 | 2 | 0 | 0 |" in text
    assert "| trainer | not run |" in text
    assert "### Failed checks\n\nNone." in text.split("## Auth")[1]
    assert "| GetJob | UNAUTH |  |  |  | NOT_FOUND | OK |" in text

    leaked = _cells(("GetJob", "member-b", "NOT_FOUND", "OK"), ("GetJob", "admin", "OK", "NOT_FOUND"))
    text = report.render(_results(), auth={"scheduler": leaked})
    assert "| scheduler | 2 | 1 | 0 | 1 | 1 |" in text
    assert "- scheduler JobService: GetJob as member-b: expected NOT_FOUND, got OK" in text
    assert "**OK** (expected NOT_FOUND)" in text


def test_without_soak_results_the_fuzz_figures_of_the_report_are_kept(tmp_path):
    out = tmp_path / "reliability.md"
    out.write_text(report.render(_results()))
    empty = tmp_path / "results"
    assert report.main(["--results-dir", str(empty), "--out", str(out)]) == 0
    text = out.read_text()
    assert "15 requests, 0 answered INTERNAL or UNKNOWN" in text and text.count(report.FUZZ_HEADING) == 1
    assert text.count(report.FINDINGS_HEADING) == 1


def test_results_in_the_results_dir_reach_the_report_and_a_failed_auth_cell_fails_it(tmp_path):
    fuzz, out, results = tmp_path / "fuzz.json", tmp_path / "reliability.md", tmp_path / "results"
    fuzz.write_text(json.dumps(_results()))
    (results / "auth").mkdir(parents=True)
    (results / "load.json").write_text(json.dumps(_load()))
    (results / "auth" / "scheduler.json").write_text(json.dumps(_cells(("GetJob", "member-b", "NOT_FOUND", "OK"))))
    argv = ["--results", str(fuzz), "--results-dir", str(results), "--out", str(out)]
    assert report.main(argv) == 1
    assert "| CreateJob | 10,000 |" in out.read_text()
