"""Every registered benchmark declares its ratio keys and has a smoke mode (run by tests/integration/bench)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from bench.__main__ import available, module

pytestmark = pytest.mark.unit

# The targets table of BENCHMARKS.md, where this checkout has it (the shared notes, beside the repo).
_BENCHMARKS_MD = [Path("/work/shared/BENCHMARKS.md"), Path(__file__).resolve().parents[4] / "shared" / "BENCHMARKS.md"]


@pytest.mark.parametrize("name", available())
def test_a_benchmark_declares_targets_and_a_smoke_mode(name):
    bench = module(name)
    assert bench.TARGETS and all(re.fullmatch(r"(>=|<=|>|<) -?[0-9.]+", b) for b in bench.TARGETS.values())
    assert "smoke" in inspect.signature(bench.run).parameters, f"bench/{name}_bench.py: run(quick, smoke=False)"


def test_the_declared_ratio_keys_are_the_documented_ones():
    doc = next((p for p in _BENCHMARKS_MD if p.exists()), None)
    if doc is None:
        pytest.skip("BENCHMARKS.md (the shared notes) is not beside this checkout")
    documented: dict[str, set[str]] = {}
    for bench, key in re.findall(r"^\| (\w+) \| `(\w+)` \|", doc.read_text(), re.M):
        documented.setdefault(bench, set()).add(key)
    for name in available():
        # Every documented ratio is declared (and so checked by the smoke run); a bench may declare more.
        assert documented.get(name, set()) <= set(module(name).TARGETS), name
