"""A Ray head crash under load, then start() + apply() (the exporter's reconcile) on a new head:
clients are told UNAVAILABLE meanwhile (issue 21.12: never INTERNAL with Ray's actor text), and a
port another program took meanwhile is not shared: the endpoint moves and says so (issue 21.1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from support.away_codes import AWAY
from support.serving import export_model

SCRIPT = Path(__file__).with_name("restart_script.py")
ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.timeout(900)
def test_serving_again_after_a_ray_head_restart(tmp_path):
    directory, _ = export_model(tmp_path / "mlp" / "1", "mlp", seed=4)
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(directory), str(tmp_path)],
        capture_output=True, text=True, timeout=840, env={**os.environ, "PYTHONPATH": os.pathsep.join((str(ROOT), str(ROOT / "tests")))},
    )
    assert run.returncode == 0, run.stderr[-4000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["before"] == seen["after_attach"] == seen["after_restart"]
    np.testing.assert_allclose(seen["rest_before"], seen["before"], rtol=1e-6)
    assert seen["rest_before"] == seen["rest_after_attach"] == seen["rest_after_restart"]
    codes = seen["during_crash"]
    # Never INTERNAL with Ray's actor text; HAProxy's two answers by name (support/away_codes.py).
    assert codes.get("OK", 0) > 0 and set(codes) - {"OK"} <= AWAY, (codes, seen["during_crash_details"])
    assert seen["grpc_port_moved"] and seen["http_port_kept"]
    assert "held by another process" in seen["note"] and str(seen["after_restart"]) != ""
    assert seen["old_port_is_the_other_programs"]
    assert seen["status"] == "READY"
