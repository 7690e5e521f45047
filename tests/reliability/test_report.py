"""The report generator: what it writes from a results file, and that every fault-injection
test it cites still exists."""

from __future__ import annotations

import json

from reliability import report


def _results(failures=()):
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
    assert report.main(["--results", str(results), "--out", str(out)]) == 0
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
