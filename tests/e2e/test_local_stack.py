"""`paddleray up` / `paddleray down`: the local stack as real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from paddleray.services.localstack import stack
from paddleray.services.localstack.health import serving
from paddleray.services.localstack.ports import pid_alive, port_open, wait_until
from paddleray.services.localstack.redis_process import redis_reachable

pytestmark = pytest.mark.e2e

EXPECTED_SERVICES = {
    "trainer": {"paddleray.trainer.v1.TrainerService"},
    "scheduler": {"paddleray.scheduler.v1.JobService", "paddleray.scheduler.v1.ExperimentService"},
    "exporter": {"paddleray.exporter.v1.ExporterService"},
}


def _paddleray(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI with os.environ changed by env (a None value removes the variable)."""
    cli = [sys.executable, "-m", "paddleray.services.cli.main", *args]
    environment = {k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None}
    return subprocess.run(cli, capture_output=True, text=True, timeout=300, env=environment)


def test_up_starts_everything_healthy_and_down_stops_exactly_it(tmp_path):
    state_dir = tmp_path / "stack"
    # No Redis named: the stack starts its own, even with one answering at the default address
    # (this machine's, on a shared host someone else's), and a Ray head on a port that is not Redis'.
    started = _paddleray("up", "--state-dir", str(state_dir), "--num-cpus", "1", env={"REDIS_URL": None})
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        state = json.loads((state_dir / "state.json").read_text())
        assert state["redis_pid"] is not None and redis_reachable(state["redis_url"])
        assert not state["redis_url"].startswith("redis://127.0.0.1:6379")
        assert not state["ray_address"].endswith(":6379") and port_open(int(state["ray_address"].rsplit(":", 1)[1]))
        for name, expected in EXPECTED_SERVICES.items():
            address = state["services"][name]["address"]
            for service in expected:
                assert serving(address, service), f"{name} does not report {service} SERVING"
            with grpc.insecure_channel(address) as channel:
                assert expected <= set(ProtoReflectionDescriptorDatabase(channel).get_services())
            metrics = urllib.request.urlopen(f"http://{state['services'][name]['metrics_address']}/metrics", timeout=5).read()
            assert b"paddleray_grpc_requests_total" in metrics
        prometheus = yaml.safe_load((state_dir / "prometheus.yml").read_text())
        assert {t for job in prometheus["scrape_configs"] for c in job["static_configs"] for t in c["targets"]} == {
            s["metrics_address"] for s in state["services"].values()
        }
        status = _paddleray("status", "--state-dir", str(state_dir), env={"COLUMNS": "200"})
        assert status.returncode == 0 and "NOT SERVING" not in status.stdout
        assert "own (started by the stack)" in status.stdout
        # A service that dies is started again by its supervisor, on its old address (issue 21.3).
        scheduler = state["services"]["scheduler"]
        killed = json.loads((state_dir / "scheduler.ready.json").read_text())["pid"]
        os.kill(killed, signal.SIGKILL)

        def back() -> bool:
            ready = json.loads((state_dir / "scheduler.ready.json").read_text())
            return ready["pid"] != killed and serving(scheduler["address"])

        wait_until(back, timeout=180, interval=0.5, message=f"the scheduler back (log: {scheduler['log_file']})")
        assert f"supervisor: scheduler (pid {killed}) was killed by SIGKILL" in Path(scheduler["log_file"]).read_text()
        restarted = json.loads((state_dir / "scheduler.ready.json").read_text())["pid"]
    finally:
        stopped = _paddleray("down", "--state-dir", str(state_dir))
    assert stopped.returncode == 0, stopped.stderr
    assert not (state_dir / "state.json").exists()
    pids = [p["pid"] for p in state["services"].values()] + [state["ray_pid"], state["redis_pid"], restarted]
    assert not [pid for pid in pids if pid_alive(pid)]
    assert not redis_reachable(state["redis_url"])
    assert _paddleray("status", "--state-dir", str(state_dir)).returncode == 7  # ExitCode.UNREACHABLE (docs/cli.md)


def test_up_uses_a_reachable_redis_and_a_given_ray_cluster(tmp_path, redis_url, ray_head):
    state = stack.up(tmp_path / "stack", redis_url=redis_url, ray_address=ray_head.address)
    try:
        assert state.redis_url == redis_url and state.redis_pid is None
        assert state.ray_address == ray_head.address and state.ray_pid is None
        assert all(serving(p.address) for p in state.services.values())
        # A second `up` finds the running stack and returns it instead of starting another.
        assert stack.up(tmp_path / "stack", redis_url=redis_url, ray_address=ray_head.address) == state
    finally:
        assert stack.down(tmp_path / "stack")
    assert port_open(ray_head.port), "down must not stop a Ray cluster the stack did not start"
    assert redis_reachable(redis_url), "down must not stop a Redis the stack did not start"


STACK_LOOP = int(os.environ.get("PADDLERAY_STACK_LOOP", "3"))


@pytest.mark.stack_loop
@pytest.mark.timeout(120 + 90 * STACK_LOOP)
def test_the_stack_starts_again_and_again_without_a_port_clash(tmp_path, redis_url, ray_head):
    """`up` then `down`, PADDLERAY_STACK_LOOP times (3 in CI; e.g. 20 by hand), never failing on a port.

    Every other start is a whole stack of its own (its Redis and Ray head, ports chosen and
    chosen again if taken); the others use the session's Redis and Ray, where the Ray workers
    already running take ephemeral ports while the services start, as in the race this guards.
    """
    for i in range(STACK_LOOP):
        own = i % 2 == 0
        state_dir = tmp_path / f"stack-{i}"
        if own:
            state = stack.up(state_dir, redis_url=None, num_cpus=1)
        else:
            state = stack.up(state_dir, redis_url=redis_url, ray_address=ray_head.address)
        try:
            assert (state.redis_pid is not None) is own and (state.ray_pid is not None) is own
            for name, process in state.services.items():
                ready = json.loads((state_dir / f"{name}.ready.json").read_text())
                # The address in the state file is the one the service reported having bound.
                # process.pid is the service's supervisor (supervisor.py), the ready file's writer its child.
                assert process.pid == ready["parent_pid"] and process.address == f"127.0.0.1:{ready['port']}", ready
                assert serving(process.address), f"iteration {i}: {name} not SERVING"
                metrics = urllib.request.urlopen(f"http://{process.metrics_address}/metrics", timeout=5).read()
                assert b"paddleray_grpc_requests_total" in metrics
        finally:
            assert stack.down(state_dir)
        for process in state.services.values():
            assert "Failed to bind" not in open(process.log_file).read(), f"iteration {i}: {process.log_file}"
