"""What every benchmark shares: A/B alternation, medians, spreads, verdicts, result files.

Every figure that decides anything is a ratio of two things measured side by side in the
same run (A B A B ..., medians), because the machines are shared and noisy.

A benchmark module `bench/<name>_bench.py` declares `TARGETS` (ratio key -> bound such as
">= 1.0", the keys and bounds of the table in bench/README.md) and `run(quick: bool, smoke: bool = False) -> dict`
returning the document built by `result`. Three sizes:
- full (the default): the figures that decide;
- quick (`--quick`, under ~3 minutes): too few rounds to reproduce the full verdict (see
  `rounds_to_reproduce` in the report), so its ratios are indicative only;
- smoke (`--smoke`, tiny sizes, one round, run by the test suite): checks that both sides
  ran and that every ratio is there and finite, never a speed.

Each ratio carries its per-round values; its spread is their min and max. Its verdict: "met"
when every round meets the target, "missed" when none does (or a precondition of the ratio
failed), "undecided" when the spread straddles the target, "indicative" in quick and smoke
runs. `meets_targets` is true when every verdict is "met", false when one is "missed", and
null otherwise.
"""

from __future__ import annotations

import itertools
import json
import math
import operator
import platform
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
MODES = ("full", "quick", "smoke")

_COMPARATORS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}
# More subsets than this per round count are sampled evenly rather than all enumerated.
_MAX_SUBSETS = 5000


def alternate(a: Callable[[], Any], b: Callable[[], Any], rounds: int) -> tuple[list, list]:
    """Runs a, b, a, b, ... `rounds` times each; returns both lists of measurements."""
    measured_a, measured_b = [], []
    for _ in range(rounds):
        measured_a.append(a())
        measured_b.append(b())
    return measured_a, measured_b


def median(values: list[float]) -> float:
    return statistics.median(values)


def paired(a: list[float], b: list[float]) -> list[float]:
    """Per-round ratios: each A over the B measured next to it."""
    return [x / y for x, y in zip(a, b, strict=True)]


def timed(fn: Callable[[], Any]) -> float:
    """Seconds one call of fn takes."""
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def meets(value: float | None, bound: str) -> bool:
    """Whether value satisfies a bound such as ">= 1.0"."""
    if value is None or not math.isfinite(value):
        return False
    op, threshold = bound.split()
    return _COMPARATORS[op](value, float(threshold))


def verdict(value: float | None, bound: str, rounds: list[float], precondition: bool = True) -> str:
    """met / missed / undecided from the per-round ratios (see the module docstring)."""
    if not precondition or value is None or not math.isfinite(value) or not rounds:
        return "missed"
    met = [meets(r, bound) for r in rounds]
    if all(met):
        return "met"
    return "missed" if not any(met) else "undecided"


def rounds_to_reproduce(rounds: list[float], bound: str) -> int | None:
    """Fewest rounds whose median lands on the same side of the bound as the median of all.

    Every choice of n of the recorded rounds (sampled when there are many) stands for a
    shorter run; n is enough when none of them would have given the other verdict. None when
    no n short of all the rounds is enough.
    """
    if not rounds:
        return None
    full = meets(median(rounds), bound)
    for n in range(1, len(rounds)):
        subsets: Iterable[tuple[float, ...]] = itertools.combinations(rounds, n)
        count = math.comb(len(rounds), n)
        if count > _MAX_SUBSETS:
            subsets = itertools.islice(subsets, 0, None, count // _MAX_SUBSETS + 1)
        if all(meets(median(list(s)), bound) == full for s in subsets):
            return n
    return None


def result(
    name: str,
    params: dict[str, Any],
    metrics: dict[str, Any],
    ratios: dict[str, float | None],
    targets: dict[str, str],
    *,
    per_round: dict[str, list[float]],
    sides: dict[str, float],
    preconditions: dict[str, bool] | None = None,
) -> dict[str, Any]:
    """The result document of bench/README.md (full size; `finish` marks quick and smoke runs).

    per_round: each ratio's value per round. sides: how much work each side of each
    comparison really did (samples, jobs, trials), so that a run where one side did nothing
    shows. preconditions: a ratio whose precondition is False is "missed" whatever its value.
    """
    missing = set(targets) - set(ratios)
    if missing:
        raise ValueError(f"targets without a measured ratio: {sorted(missing)}")
    missing = set(targets) - set(per_round)
    if missing:
        raise ValueError(f"targets without per-round ratios: {sorted(missing)}")
    preconditions = preconditions or {}
    verdicts = {
        key: verdict(ratios[key], bound, per_round[key], preconditions.get(key, True)) for key, bound in targets.items()
    }
    return {
        "name": name,
        "mode": "full",
        "params": params,
        "metrics": metrics,
        "ratios": ratios,
        "targets": targets,
        "per_round": per_round,
        "spread": {key: _spread(values) for key, values in per_round.items()},
        "sides": sides,
        "preconditions": preconditions,
        "verdicts": verdicts,
        "meets_targets": _meets_targets(verdicts),
        "machine": {"python": platform.python_version(), "cpus": _cpu_count(), "host": platform.node()},
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def finish(doc: dict[str, Any], mode: str) -> dict[str, Any]:
    """Records the run's size; quick and smoke ratios decide nothing."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    doc["mode"] = mode
    doc.setdefault("params", {})["quick"] = mode != "full"
    if mode != "full":
        doc["verdicts"] = dict.fromkeys(doc["targets"], "indicative")
        doc["meets_targets"] = None
    return doc


def _spread(values: list[float]) -> dict[str, float | int | None]:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return {"min": min(finite, default=None), "max": max(finite, default=None), "rounds": len(values)}


def _meets_targets(verdicts: dict[str, str]) -> bool | None:
    if all(v == "met" for v in verdicts.values()):
        return True
    return False if "missed" in verdicts.values() else None


def write_result(doc: dict[str, Any], results_dir: Path | None = None) -> Path:
    results_dir = results_dir or RESULTS_DIR
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{doc['name']}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


def _cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0))
