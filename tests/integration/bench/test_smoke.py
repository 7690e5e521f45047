"""Every registered benchmark's smoke mode runs in CI: both sides ran, every ratio is there and finite.

A benchmark nothing runs rots silently. This runs `python -m bench NAME --smoke` (tiny sizes,
one round, its own Redis/Ray processes) for every bench/<name>_bench.py, so a new benchmark
is covered by existing. It asserts no speed: smoke ratios are indicative only.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import available, module

pytestmark = [pytest.mark.integration, pytest.mark.bench_smoke]

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", available())
def test_smoke_run_has_both_sides_and_every_ratio(name, tmp_path):
    targets = module(name).TARGETS
    done = subprocess.run(
        [sys.executable, "-m", "bench", name, "--smoke", "--results-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=840, env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    doc = json.loads((tmp_path / f"{name}.json").read_text())
    assert json.loads(done.stdout.strip().splitlines()[-1]) == doc, "the last line printed is the result"
    assert doc["mode"] == "smoke" and doc["meets_targets"] is None
    assert doc["verdicts"] == dict.fromkeys(targets, "indicative")
    assert doc["targets"] == targets
    for key in targets:
        assert math.isfinite(doc["ratios"][key]), (key, doc["ratios"])
        rounds = doc["per_round"][key]
        assert rounds and all(math.isfinite(r) for r in rounds), (key, rounds)
        assert doc["spread"][key] == {"min": min(rounds), "max": max(rounds), "rounds": len(rounds)}
        # One round: the headline ratio is that round's (up to the rounding of the headline).
        assert math.isclose(doc["ratios"][key], rounds[0], rel_tol=1e-3), (key, doc["ratios"][key], rounds)
    # Both sides of the comparison did real work (samples, jobs, trials, probes).
    assert len(doc["sides"]) >= 2 and all(count > 0 for count in doc["sides"].values()), doc["sides"]
