"""After a Ray head restart, start() + apply() (the exporter's reconcile) serve again, through
Serve's proxy and through the model's own endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.serving import export_model

SCRIPT = Path(__file__).with_name("restart_script.py")
ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.timeout(900)
def test_serving_again_after_a_ray_head_restart(tmp_path):
    directory, _ = export_model(tmp_path / "mlp" / "1", "mlp", seed=4)
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(directory), str(tmp_path)],
        capture_output=True, text=True, timeout=840, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert run.returncode == 0, run.stderr[-4000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["before"] == seen["after_attach"] == seen["after_restart"]
    assert seen["direct_before"] == seen["direct_after_attach"] == seen["direct_after_restart"] == seen["before"]
    assert seen["status"] == "READY"
