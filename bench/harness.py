"""What every benchmark shares: A/B alternation, medians, target checks, result files.

Every figure that decides anything is a ratio of two things measured side by side in the
same run (A B A B ..., medians), because the machines are shared and noisy.
"""

from __future__ import annotations

import json
import operator
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"

_COMPARATORS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}


def alternate(a: Callable[[], float], b: Callable[[], float], rounds: int) -> tuple[list[float], list[float]]:
    """Runs a, b, a, b, ... `rounds` times each; returns both lists of measurements."""
    measured_a, measured_b = [], []
    for _ in range(rounds):
        measured_a.append(a())
        measured_b.append(b())
    return measured_a, measured_b


def median(values: list[float]) -> float:
    return statistics.median(values)


def timed(fn: Callable[[], Any]) -> float:
    """Seconds one call of fn takes."""
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def meets(value: float | None, bound: str) -> bool:
    """Whether value satisfies a bound such as ">= 1.0"."""
    if value is None:
        return False
    op, threshold = bound.split()
    return _COMPARATORS[op](value, float(threshold))


def result(
    name: str,
    params: dict[str, Any],
    metrics: dict[str, Any],
    ratios: dict[str, float | None],
    targets: dict[str, str],
) -> dict[str, Any]:
    """The result document of BENCHMARKS.md; meets_targets is computed, never given."""
    missing = set(targets) - set(ratios)
    if missing:
        raise ValueError(f"targets without a measured ratio: {sorted(missing)}")
    return {
        "name": name,
        "params": params,
        "metrics": metrics,
        "ratios": ratios,
        "targets": targets,
        "meets_targets": all(meets(ratios[key], bound) for key, bound in targets.items()),
        "machine": {"python": platform.python_version(), "cpus": _cpu_count(), "host": platform.node()},
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_result(doc: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{doc['name']}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


def _cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0))
