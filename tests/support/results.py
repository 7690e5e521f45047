"""Figures the reliability report is written from, recorded by the tests that measure them.

Each test writes JSON under tests/reliability/results/ (not committed; set
PADDLERAY_RELIABILITY_RESULTS_DIR to put it elsewhere), which `make reliability-report` reads:
  faults/<test>.json    what a fault-injection test injected and measured, written only once
                        its assertions passed (the `fault_figures` fixture removes the last
                        run's file first, so a failing run leaves none)
  auth/<service>.json   every cell of the service's auth matrices: caller, RPC, expected and
                        got code, written before the matrix is asserted on, so a wrong cell
                        is in the report too
  load.json             the scheduler load test's figures
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import grpc

RESULTS_DIR = Path(os.environ.get("PADDLERAY_RELIABILITY_RESULTS_DIR",
                                  Path(__file__).resolve().parents[1] / "reliability" / "results"))


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        return ""


def write(relative: str, payload: dict) -> Path:
    """payload plus the commit and time it was measured at, as results/<relative>."""
    path = RESULTS_DIR / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"commit": _commit(), "recorded": time.time(), **payload}, indent=1) + "\n")
    return path


class FaultFigures:
    """One fault-injection test's figures: faults injected, jobs submitted / lost / duplicated,
    recovery times (seconds), under the test's node id."""

    def __init__(self, test_id: str) -> None:
        self.test_id = test_id
        self.path = RESULTS_DIR / "faults" / (test_id.split("::")[-1] + ".json")

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)

    def record(self, **figures: object) -> None:
        write(f"faults/{self.path.name}", {"test": self.test_id, "figures": figures})


def record_auth_matrix(service: str, matrix: str, expected: dict[str, dict[str, grpc.StatusCode]],
                       got: dict[str, dict[str, grpc.StatusCode]]) -> None:
    """Adds (replaces) one matrix of `service` in results/auth/<service>.json: rpc -> caller -> code."""
    path = RESULTS_DIR / "auth" / f"{service}.json"
    commit = _commit()
    try:
        matrices = json.loads(path.read_text())["matrices"] if path.exists() else {}
    except (ValueError, KeyError):  # a file a killed run left half-written: start again
        matrices = {}
    # Only this commit's matrices stay: one renamed, removed or no longer reached is not reported.
    matrices = {name: m for name, m in matrices.items() if m.get("commit") == commit}
    matrices[matrix] = {"commit": commit, "recorded": time.time(),
                        "cells": [{"rpc": rpc, "caller": caller, "expected": want.name, "got": got[rpc][caller].name}
                                  for rpc, row in expected.items() for caller, want in row.items()]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"service": service, "matrices": matrices}, indent=1) + "\n")
