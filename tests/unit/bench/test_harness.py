"""The bench harness computes targets itself and writes the documented result format."""

from __future__ import annotations

import json

import pytest

from bench import harness, report

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("value", "bound", "expected"),
    [(1.0, ">= 1.0", True), (0.99, ">= 1.0", False), (0.2, "<= 0.25", True), (0.3, "<= 0.25", False), (None, ">= 1", False)],
)
def test_meets(value, bound, expected):
    assert harness.meets(value, bound) is expected


def test_result_computes_meets_targets_from_the_ratios():
    doc = harness.result("x", {}, {"m": 1}, {"a": 1.2, "b": 0.5}, {"a": ">= 1.0", "b": "<= 0.3"})
    assert doc["meets_targets"] is False
    assert set(doc) >= {"name", "params", "metrics", "ratios", "targets", "meets_targets"}


def test_a_target_without_a_measured_ratio_is_an_error():
    with pytest.raises(ValueError, match="missing"):
        harness.result("x", {}, {}, {}, {"missing": ">= 1.0"})


def test_alternate_interleaves_a_and_b():
    order = []
    harness.alternate(lambda: order.append("a") or 1.0, lambda: order.append("b") or 2.0, rounds=3)
    assert order == ["a", "b", "a", "b", "a", "b"]


def test_report_lists_every_result(tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(report, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(report, "REPORT", tmp_path / "REPORT.md")
    doc = harness.result("demo", {"quick": True}, {"jobs_per_s": 10}, {"r": 2.0}, {"r": ">= 1.0"})
    harness.write_result(doc)
    assert json.loads((tmp_path / "demo.json").read_text())["meets_targets"] is True
    text = report.write_report().read_text()
    assert "| demo | `r` | 2.000 | >= 1.0 | yes |" in text
    assert (tmp_path / "demo.png").exists()
