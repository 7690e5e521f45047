"""The trainer process and its Ray cluster, on a Ray head of the test's own that it stops and starts.

- Until the trainer has loaded its runs and connected to the configured Ray address, health
  says NOT_SERVING and StartRun answers UNAVAILABLE: a StartRun in that window used to make
  Ray auto-initialise with no address and attach to whatever /tmp/ray/ray_current_cluster
  named (here: the session's shared head, started by the `ray_head` fixture for that reason).
- When the head restarts, the run active on it ends FAILED (its actors ended with the
  cluster; the scheduler retries such attempts from their last checkpoint), the trainer
  says NOT_SERVING / UNAVAILABLE while Ray is away, reconnects by itself, and serves again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from paddleray.common.v1 import common_pb2
from paddleray.services.localstack.ports import free_port, wait_until
from paddleray.services.localstack.ray_head import AUTH_ENV, RayHead
from paddleray.trainer.v1 import run_pb2, trainer_service_pb2, trainer_service_pb2_grpc

pytestmark = pytest.mark.e2e

WORKER_CODE = Path(__file__).resolve().parents[1] / "integration" / "trainer" / "workers"
ENTRYPOINTS = "trainer_test_entrypoints"
# Bounds, not expectations: a fresh head's raylet registers late on a loaded 2-core machine,
# and a driver's ray.init fails until it has (the trainer tries again).
HEAD_START_S = 600
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class TrainerProcess:
    def __init__(self, tmp_path: Path, ray_address: str, lost_after_s: float = 3) -> None:
        self.port = free_port()
        self.log = tmp_path / "trainer.log"
        env = {
            **os.environ, **AUTH_ENV,
            "PADDLERAY_TRAINER_HOST": "127.0.0.1",
            "PADDLERAY_TRAINER_PORT": str(self.port),
            "PADDLERAY_TRAINER_RAY_ADDRESS": ray_address,
            "PADDLERAY_TRAINER_STORAGE_ROOT": str(tmp_path / "storage"),
            "PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST": f'["{ENTRYPOINTS}"]',
            "PADDLERAY_TRAINER_POOL_MAX_IDLE_GROUPS": "0",
            "PADDLERAY_TRAINER_RAY_PROBE_INTERVAL_S": "0.5",
            "PADDLERAY_TRAINER_RAY_LOST_AFTER_S": str(lost_after_s),
            "PADDLERAY_TRAINER_RAY_RETRY_INTERVAL_S": "1",
        }
        env.pop("RAY_ADDRESS", None)
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "paddleray.services.trainer"], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = trainer_service_pb2_grpc.TrainerServiceStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    def status(self) -> int | None:
        """The health status, or None while the server does not answer at all."""
        if self.process.poll() is not None:
            raise AssertionError(f"the trainer exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
        try:
            return self.health.Check(health_pb2.HealthCheckRequest(), timeout=2).status
        except grpc.RpcError:
            return None

    def wait_status(self, wanted: int, timeout: float) -> None:
        try:
            wait_until(lambda: self.status() == wanted, timeout=timeout, interval=0.2, message=f"health {wanted}")
        except TimeoutError:
            raise AssertionError(f"health never became {wanted}; the trainer's log:\n{self.log.read_text()[-4000:]}") from None

    def start_run(self, function: str, config: dict | None = None) -> run_pb2.Run:
        struct = struct_pb2.Struct()
        struct.update(config or {})
        spec = common_pb2.TrainingSpec(
            entrypoint=f"{ENTRYPOINTS}:{function}",
            config=struct,
            num_workers=1,
            resources_per_worker=common_pb2.Resources(num_cpus=1),
            runtime_env=common_pb2.RuntimeEnv(env_vars={"PYTHONPATH": str(WORKER_CODE)}),
        )
        return self.stub.StartRun(trainer_service_pb2.StartRunRequest(spec=spec), timeout=30).run

    def run(self, name: str) -> run_pb2.Run:
        return self.stub.GetRun(trainer_service_pb2.GetRunRequest(name=name), timeout=10).run

    def wait_run(self, name: str, predicate, timeout: float = 600) -> run_pb2.Run:
        def reached():
            run = self.run(name)
            return run if predicate(run) else None

        return wait_until(reached, timeout=timeout, interval=0.2, message=f"a condition on {name}")

    def stop(self) -> None:
        self.channel.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _code(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value.code()


@pytest.fixture
def own_head():
    # Not started: the test starts and restarts it, on a port fixed up front because the
    # trainer is given the address before the head exists (a restarted head keeps its address).
    head = RayHead(num_cpus=1, port=free_port())
    yield head
    head.stop()


@pytest.fixture
def trainer(tmp_path, own_head):
    process = TrainerProcess(tmp_path, own_head.address)
    yield process
    process.stop()


@pytest.mark.timeout(1200)
def test_not_serving_and_unavailable_until_connected_never_attaching_elsewhere(trainer, own_head, ray_head):
    # The server answers while the trainer waits for its (not yet started) Ray head.
    wait_until(lambda: trainer.status() is not None, timeout=300, interval=0.2, message="the trainer's gRPC port")
    assert trainer.status() == NOT_SERVING
    assert _code(lambda: trainer.start_run("hello")) == grpc.StatusCode.UNAVAILABLE
    get_resources = trainer_service_pb2.GetClusterResourcesRequest()
    assert _code(lambda: trainer.stub.GetClusterResources(get_resources, timeout=10)) == grpc.StatusCode.UNAVAILABLE
    assert trainer.status() == NOT_SERVING

    own_head.start()
    trainer.wait_status(SERVING, timeout=HEAD_START_S)
    # The cluster it drives is the configured one (1 CPU), not the session's (2 CPUs).
    resources = trainer.stub.GetClusterResources(get_resources, timeout=30)
    assert resources.total.num_cpus == 1
    run = trainer.start_run("hello")
    done = trainer.wait_run(run.name, lambda r: r.state == run_pb2.RUN_STATE_SUCCEEDED or r.state == run_pb2.RUN_STATE_FAILED)
    assert done.state == run_pb2.RUN_STATE_SUCCEEDED, done.state_reason


@pytest.mark.timeout(1800)
def test_a_head_restart_fails_the_active_run_and_the_trainer_reconnects(trainer, own_head):
    own_head.start()
    trainer.wait_status(SERVING, timeout=HEAD_START_S)
    active = trainer.start_run("wait_for_stop")
    trainer.wait_run(active.name, lambda r: r.state == run_pb2.RUN_STATE_RUNNING)

    own_head.stop()
    ended = trainer.wait_run(active.name, lambda r: r.state == run_pb2.RUN_STATE_FAILED, timeout=120)
    assert ended.state_reason, "a run lost with its cluster says why"
    # While the head is away: not serving, and nothing is started anywhere else.
    trainer.wait_status(NOT_SERVING, timeout=60)
    assert _code(lambda: trainer.start_run("hello")) == grpc.StatusCode.UNAVAILABLE
    # Reads need no Ray: the lost run stays visible.
    assert trainer.run(active.name).state == run_pb2.RUN_STATE_FAILED

    own_head.start()
    trainer.wait_status(SERVING, timeout=HEAD_START_S)
    after = trainer.start_run("hello")
    done = trainer.wait_run(after.name, lambda r: r.state in (run_pb2.RUN_STATE_SUCCEEDED, run_pb2.RUN_STATE_FAILED))
    assert done.state == run_pb2.RUN_STATE_SUCCEEDED, done.state_reason
    assert trainer.run(active.name).state == run_pb2.RUN_STATE_FAILED


@pytest.mark.timeout(1200)
def test_a_head_back_before_lost_after_s_is_seen_as_a_restart_at_once(tmp_path, own_head):
    """The window of a quick restart: the new head is up before the driver gave the old one up.
    The driver must survive (Ray's WrongClusterID check kills drivers that reconnect to a new
    GCS) and take the new cluster when it answers, not after lost_after_s (here 45 s, the most
    the settings allow)."""
    own_head.start()
    trainer = TrainerProcess(tmp_path, own_head.address, lost_after_s=45)
    try:
        trainer.wait_status(SERVING, timeout=HEAD_START_S)
        own_head.stop()
        own_head.start()
        trainer.wait_status(SERVING, timeout=300)
        assert "was lost (restarted)" in trainer.log.read_text()
        run = trainer.start_run("hello")
        done = trainer.wait_run(run.name, lambda r: r.state in (run_pb2.RUN_STATE_SUCCEEDED, run_pb2.RUN_STATE_FAILED))
        assert done.state == run_pb2.RUN_STATE_SUCCEEDED, done.state_reason
    finally:
        trainer.stop()
