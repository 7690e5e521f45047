"""The window right after a Ray head goes: what the services submit then must not freeze them.

Measured (Ray 2.60, GCS killed): placement_group() and the first .remote() of each ray.remote
object on a connection (it exports the function or actor class to the GCS, with no timeout) wait
on the GCS until Ray ends the process a minute later. A CI run lost the exporter that way: its
head stopped while an export was being submitted on the event loop, so nothing (not its health
check, not the connection's probe) ran until Ray ended it. Each operation below is what a
service does from its event loop; the loop must keep running while the GCS is gone, so the
connection's probe can see the loss and let go of the cluster in time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from paddleray.services.localstack.ray_head import AUTH_ENV, RayHead
from support import free_port

pytestmark = pytest.mark.e2e
DRIVER = Path(__file__).parents[1] / "support" / "gcs_down_driver.py"
# The loop ticks every 20 ms; on a loaded 2-core machine a tick may come late, never seconds late.
MAX_STALL_S = 1.0


def _gcs_pids(port: int) -> list[int]:
    found = subprocess.run(["pgrep", "-f", f"gcs_server.*--gcs_server_port={port}"], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


@pytest.mark.timeout(600)
def test_submitting_while_the_gcs_is_down_leaves_the_event_loop_running(tmp_path):
    port = free_port()
    head = RayHead(num_cpus=2, port=port, log_file=tmp_path / "ray-head.log")
    head.start()
    driver = None
    try:
        driver = subprocess.Popen([sys.executable, str(DRIVER), head.address], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=open(tmp_path / "driver.log", "w"), text=True,
                                  env={**os.environ, **AUTH_ENV}, cwd=Path(__file__).parents[2])
        assert json.loads(driver.stdout.readline()) == {"connected": True}, (tmp_path / "driver.log").read_text()
        pids = _gcs_pids(port)
        assert pids, "the head's GCS process was not found"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        driver.stdin.write("go\n")
        driver.stdin.flush()
        stalls = {}
        for line in driver.stdout:
            report = json.loads(line)
            stalls[report["op"]] = report["stall_s"]
        frozen = {op: s for op, s in stalls.items() if s is None or s > MAX_STALL_S}
        assert not frozen, f"the event loop stalled (None: for good) while the GCS was down: {stalls}"
        assert set(stalls) == {"submit_export", "reserve_group", "start_group_actors"}, stalls
    finally:
        if driver is not None:
            driver.kill()
            driver.wait()
        head.stop()
