"""The bench harness computes verdicts itself and writes the documented result format."""

from __future__ import annotations

import json

import pytest

from bench import harness, report

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("value", "bound", "expected"),
    [(1.0, ">= 1.0", True), (0.99, ">= 1.0", False), (0.2, "<= 0.25", True), (0.3, "<= 0.25", False),
     (None, ">= 1", False), (float("nan"), ">= 1", False)],
)
def test_meets(value, bound, expected):
    assert harness.meets(value, bound) is expected


def _doc(ratios, targets, per_round, **kwargs):
    return harness.result("x", {}, {"m": 1}, ratios, targets, per_round=per_round, sides={"a": 1, "b": 1}, **kwargs)


def test_a_verdict_comes_from_the_spread_over_rounds():
    doc = _doc(
        {"met": 1.2, "missed": 0.5, "straddles": 1.01},
        {"met": ">= 1.0", "missed": ">= 1.0", "straddles": ">= 1.0"},
        {"met": [1.1, 1.3], "missed": [0.4, 0.6], "straddles": [0.95, 1.01, 1.06]},
    )
    assert doc["verdicts"] == {"met": "met", "missed": "missed", "straddles": "undecided"}
    assert doc["spread"]["straddles"] == {"min": 0.95, "max": 1.06, "rounds": 3}
    assert doc["meets_targets"] is False
    assert set(doc) >= {"name", "params", "metrics", "ratios", "targets", "meets_targets", "spread", "sides"}


def test_undecided_is_not_met_and_a_failed_precondition_is_missed():
    assert _doc({"r": 1.1}, {"r": ">= 1.0"}, {"r": [0.9, 1.1, 1.2]})["meets_targets"] is None
    doc = _doc({"r": 0.5}, {"r": "<= 0.6"}, {"r": [0.5]}, preconditions={"r": False})
    assert doc["verdicts"] == {"r": "missed"} and doc["meets_targets"] is False


def test_quick_and_smoke_runs_are_indicative_only():
    for mode in ("quick", "smoke"):
        doc = harness.finish(_doc({"r": 2.0}, {"r": ">= 1.0"}, {"r": [2.0]}), mode)
        assert doc["verdicts"] == {"r": "indicative"} and doc["meets_targets"] is None and doc["mode"] == mode
    assert harness.finish(_doc({"r": 2.0}, {"r": ">= 1.0"}, {"r": [2.0]}), "full")["meets_targets"] is True


def test_a_target_without_a_measured_ratio_or_its_rounds_is_an_error():
    with pytest.raises(ValueError, match="missing"):
        _doc({}, {"missing": ">= 1.0"}, {})
    with pytest.raises(ValueError, match="per-round"):
        _doc({"r": 1.0}, {"r": ">= 1.0"}, {})


def test_rounds_to_reproduce_counts_the_rounds_any_of_whose_medians_agree():
    # Every round on one side: one round is enough.
    assert harness.rounds_to_reproduce([1.2, 1.3, 1.1, 1.25], ">= 1.0") == 1
    # One round in five far below: a pair with it can fall below, any 3 rounds cannot.
    assert harness.rounds_to_reproduce([1.2, 0.7, 1.1, 1.15, 1.3], ">= 1.0") == 3
    # Half the rounds on each side: no shorter run reproduces the verdict.
    assert harness.rounds_to_reproduce([0.9, 1.1, 0.95, 1.05], ">= 1.0") is None


def test_alternate_interleaves_a_and_b():
    order = []
    harness.alternate(lambda: order.append("a") or 1.0, lambda: order.append("b") or 2.0, rounds=3)
    assert order == ["a", "b", "a", "b", "a", "b"]


def test_report_lists_every_ratio_with_its_spread(tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(report, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(report, "REPORT", tmp_path / "REPORT.md")
    doc = harness.finish(_doc({"r": 2.0, "extra": 0.5}, {"r": ">= 1.0"}, {"r": [1.5, 2.0, 2.5], "extra": [0.5]}), "full")
    harness.write_result(doc)
    assert json.loads((tmp_path / "x.json").read_text())["meets_targets"] is True
    text = report.write_report().read_text()
    assert "| x | `r` | 2.000 | 1.500 - 2.500 (3 rounds) | >= 1.0 | met | 1 of 3 | full |" in text, text
    assert "`extra`: 0.500, spread 0.500 - 0.500 (1 rounds)" in text
    assert (tmp_path / "x.png").exists()
