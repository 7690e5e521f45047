"""After a head restart, a reconnected driver must not use the old cluster's Serve client.

Serve caches its controller client per driver job id, and job ids count from 01000000 on every
new cluster: the exporter, the first driver of a restarted head, got its old job id again, so
Serve took the dead cluster's client for the current one and called the old controller through a
stale actor handle; about one head restart in fifteen the exporter then died of SIGSEGV
(services/common/ray_connection.py, forget_serve_client).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from paddleray.services.localstack.ray_head import AUTH_ENV, RayHead
from support import free_port

pytestmark = pytest.mark.e2e
DRIVER = Path(__file__).parents[1] / "support" / "serve_reconnect_driver.py"


@pytest.mark.timeout(900)
def test_a_reconnected_driver_does_not_take_the_old_clusters_serve_client(tmp_path):
    head = RayHead(num_cpus=2, port=free_port(), log_file=tmp_path / "ray-head.log")
    head.start()
    log = tmp_path / "driver.log"
    driver = subprocess.Popen([sys.executable, str(DRIVER), head.address], stdout=subprocess.PIPE,
                              stderr=open(log, "w"), text=True, env={**os.environ, **AUTH_ENV},
                              cwd=Path(__file__).parents[2])
    try:
        first = json.loads(driver.stdout.readline() or "{}")
        assert first.get("connected"), log.read_text()[-3000:]
        head.stop()
        assert "lost" in json.loads(driver.stdout.readline() or "{}"), log.read_text()[-3000:]
        head.start()
        again = json.loads(driver.stdout.readline() or "{}")
        assert again.get("old_client_taken_as_current") is False, (first, again, log.read_text()[-3000:])
        assert driver.wait(timeout=60) == 0, log.read_text()[-3000:]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        head.stop()
