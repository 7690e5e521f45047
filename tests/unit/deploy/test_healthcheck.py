"""deploy/healthcheck.py, the images' HEALTHCHECK, against a real gRPC server's health service."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from paddleray.services.common.settings import ServiceSettings
from paddleray.services.localstack.ports import free_port
from support import ServerThread
from support.deploy import DEPLOY

pytestmark = pytest.mark.unit


def _check(env: dict[str, str]) -> int:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PADDLERAY_")}
    return subprocess.run([sys.executable, str(DEPLOY / "healthcheck.py")], env={**clean, **env}, timeout=60).returncode


def test_a_service_container_is_healthy_exactly_while_its_server_says_serving():
    server = ServerThread(ServiceSettings(port=0), [])
    try:
        assert _check({"PADDLERAY_TRAINER_PORT": str(server.port)}) == 0
        server.run(server.server.set_serving(False))
        assert _check({"PADDLERAY_TRAINER_PORT": str(server.port)}) == 1
    finally:
        server.stop()
    assert _check({"PADDLERAY_SCHEDULER_PORT": str(free_port())}) == 1, "nothing listening"
