"""Every registered benchmark declares its ratio keys and has a smoke mode (run by tests/integration/bench),
and its targets are the ones bench/README.md documents."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from bench.__main__ import available, module

pytestmark = pytest.mark.unit

README = Path(__file__).resolve().parents[3] / "bench" / "README.md"


def documented_targets(text: str) -> dict[str, dict[str, str]]:
    """bench -> {ratio key: bound} of the targets table in bench/README.md."""
    documented: dict[str, dict[str, str]] = {}
    for bench, key, bound in re.findall(r"^\| (\w+) \| `(\w+)` \| ([<>=]+ -?[0-9.]+) \|", text, re.M):
        documented.setdefault(bench, {})[key] = bound
    return documented


@pytest.mark.parametrize("name", available())
def test_a_benchmark_declares_targets_and_a_smoke_mode(name):
    bench = module(name)
    assert bench.TARGETS and all(re.fullmatch(r"(>=|<=|>|<) -?[0-9.]+", b) for b in bench.TARGETS.values())
    assert "smoke" in inspect.signature(bench.run).parameters, f"bench/{name}_bench.py: run(quick, smoke=False)"


def test_the_declared_targets_are_the_documented_ones():
    documented = documented_targets(README.read_text())
    # Every benchmark's table rows are its TARGETS, key for key and bound for bound, and the table
    # names no benchmark that does not exist.
    assert {name: dict(module(name).TARGETS) for name in available()} == documented


def test_a_target_that_differs_from_the_table_is_seen():
    table = "| sweep | `sweep_vs_tune` | <= 0.3 | wall time | why |\n| sweep | `asha_compute_fraction` | <= 0.6 | x | |\n"
    assert documented_targets(table) == {"sweep": {"sweep_vs_tune": "<= 0.3", "asha_compute_fraction": "<= 0.6"}}
    assert documented_targets(table)["sweep"] != dict(module("sweep").TARGETS)
