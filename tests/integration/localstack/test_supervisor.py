"""The local stack's supervisor (services/localstack/supervisor.py) with a real service (the
scheduler, on a real Redis): a service SIGKILLed is started again on its old port, with the
restart logged; SIGTERM to the supervisor stops the service and nothing restarts it; a
supervisor SIGKILLed takes its service with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from paddleray.services.localstack import supervisor
from paddleray.services.localstack.health import serving
from paddleray.services.localstack.ports import pid_alive, read_ready_file
from support import free_port, wait_until

pytestmark = pytest.mark.timeout(300)


def _start(redis_url: str, tmp_path) -> tuple[subprocess.Popen, object, object]:
    ready, log = tmp_path / "scheduler.ready.json", tmp_path / "scheduler.log"
    env = {**os.environ, "PADDLERAY_SCHEDULER_PORT": "0", "PADDLERAY_SCHEDULER_READY_FILE": str(ready),
           "PADDLERAY_SCHEDULER_REDIS_URL": redis_url, "PADDLERAY_SCHEDULER_TRAINER_ADDRESS": f"127.0.0.1:{free_port()}",
           "PADDLERAY_SCHEDULER_GRACE_PERIOD_S": "0"}
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "paddleray.services.localstack.supervisor", "scheduler"],
                                   env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return process, ready, log


def _serving_child(process: subprocess.Popen, ready, log, other_than: int | None = None) -> dict:
    def up():
        assert process.poll() is None, log.read_text()[-3000:]
        document = read_ready_file(ready)
        if document is None or document["pid"] == other_than or document.get("parent_pid") != process.pid:
            return None
        return document if serving(f"127.0.0.1:{document['port']}") else None

    return wait_until(up, timeout=120, interval=0.2, message=f"the supervised scheduler to serve (log: {log})")


def test_a_killed_service_comes_back_on_its_port_and_a_stopped_supervisor_stops_it(redis_url, tmp_path):
    process, ready, log = _start(redis_url, tmp_path)
    try:
        first = _serving_child(process, ready, log)
        os.kill(first["pid"], signal.SIGKILL)
        again = _serving_child(process, ready, log, other_than=first["pid"])
        assert (again["port"], again["metrics_port"]) == (first["port"], first["metrics_port"])
        assert f"supervisor: scheduler (pid {first['pid']}) was killed by SIGKILL" in log.read_text()
        assert f"restart 1 in 0.5 s on port {first['port']}" in log.read_text()

        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0, log.read_text()[-3000:]
        wait_until(lambda: not pid_alive(again["pid"]), timeout=30, interval=0.1, message="the service to stop")
        assert "restart 2" not in log.read_text()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def test_a_service_outlives_no_supervisor_killed_with_sigkill(redis_url, tmp_path):
    process, ready, log = _start(redis_url, tmp_path)
    try:
        child = _serving_child(process, ready, log)
        process.send_signal(signal.SIGKILL)  # the supervisor alone, not its process group
        process.wait(10)
        wait_until(lambda: not pid_alive(child["pid"]), timeout=30, interval=0.1,
                   message="the service to end with its supervisor")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def test_the_backoff_doubles_for_a_crash_loop_up_to_its_cap_and_a_ray_loss_is_no_crash():
    assert [supervisor.backoff_s(n) for n in range(0, 9)] == [0.5, 0.5, 1, 2, 4, 8, 16, 30, 30]
    assert "Ray cluster was lost" in supervisor.describe_exit(75)
    assert supervisor.describe_exit(-11) == "was killed by SIGSEGV"


def test_a_service_that_never_came_up_is_not_restarted(tmp_path):
    """A bad setting ends the service with exit 2 and one line: `paddleray up` reports that line
    (StartUpFailed), so the supervisor exits with the code instead of restarting it."""
    env = {**os.environ, "PADDLERAY_SCHEDULER_READY_FILE": str(tmp_path / "ready.json"),
           "PADDLERAY_SCHEDULER_PORT": "not-a-port"}
    run = subprocess.run([sys.executable, "-m", "paddleray.services.localstack.supervisor", "scheduler"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr[-2000:]
    assert "PADDLERAY_SCHEDULER_PORT" in run.stderr and "not restarting it" in run.stderr
