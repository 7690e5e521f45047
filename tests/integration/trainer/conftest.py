"""A trainer served in-process over a real channel, driving the session's shared Ray head."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from google.protobuf import struct_pb2

from paddleray.common.v1 import common_pb2
from paddleray.services.common import states
from paddleray.services.trainer.__main__ import registrations
from paddleray.services.trainer.settings import TrainerSettings
from paddleray.services.trainer.trainer import Trainer
from paddleray.trainer.v1 import run_pb2, trainer_service_pb2, trainer_service_pb2_grpc
from support import ServerThread, wait_until

WORKER_CODE = Path(__file__).parent / "workers"
ENTRYPOINTS = "trainer_test_entrypoints"


@pytest.fixture(scope="module")
def trainer_service(ray_cluster, tmp_path_factory):
    """One trainer per test module: warm groups carry over from test to test, and are released
    after the module so that they hold none of the shared head's CPUs for later tests."""
    import ray

    # Runs here take whole CPUs of the shared 2-CPU head: with anything an earlier test left
    # (Serve replicas) holding part of one, every test would wait out its timeout instead.
    wait_until(lambda: ray.available_resources().get("CPU", 0) >= 2, timeout=120, interval=0.5,
               message="the shared Ray head's 2 CPUs to be free (an earlier test left something holding them)")
    settings = TrainerSettings(
        port=0,
        storage_root=tmp_path_factory.mktemp("trainer-storage"),
        entrypoint_allowlist=[ENTRYPOINTS],
        stop_grace_s=2.0,
        pool_max_idle_groups=2,
    )
    trainer = Trainer(settings)
    server = ServerThread(settings, registrations(trainer))
    server.run(trainer.start())
    yield server, trainer
    server.run(trainer.shutdown())
    server.stop()


@pytest.fixture
def trainer(trainer_service) -> Trainer:
    return trainer_service[1]


class TrainerClient:
    """The TrainerService stub plus the few helpers every trainer test needs."""

    def __init__(self, stub) -> None:
        self.stub = stub

    def spec(self, function: str, config: dict | None = None, num_workers: int = 1) -> common_pb2.TrainingSpec:
        struct = struct_pb2.Struct()
        struct.update(config or {})
        return common_pb2.TrainingSpec(
            entrypoint=f"{ENTRYPOINTS}:{function}",
            config=struct,
            num_workers=num_workers,
            resources_per_worker=common_pb2.Resources(num_cpus=1),
            runtime_env=common_pb2.RuntimeEnv(env_vars={"PYTHONPATH": str(WORKER_CODE)}),
        )

    def start(self, function: str, config: dict | None = None, num_workers: int = 1, **request) -> run_pb2.Run:
        spec = self.spec(function, config, num_workers)
        return self.stub.StartRun(trainer_service_pb2.StartRunRequest(spec=spec, **request), timeout=30).run

    def get(self, name: str) -> run_pb2.Run:
        return self.stub.GetRun(trainer_service_pb2.GetRunRequest(name=name), timeout=10).run

    def wait_done(self, name: str, timeout: float = 120) -> run_pb2.Run:
        def finished():
            run = self.get(name)
            return run if run.state in states.RUN_TERMINAL else None

        return wait_until(finished, timeout=timeout, interval=0.1, message=f"{name} to end")

    def wait_for(self, name: str, predicate, timeout: float = 120) -> run_pb2.Run:
        def reached():
            run = self.get(name)
            return run if predicate(run) else None

        return wait_until(reached, timeout=timeout, interval=0.05, message=f"a condition on {name}")


@pytest.fixture
def client(trainer_service):
    server, _ = trainer_service
    with grpc.insecure_channel(server.address) as channel:
        yield TrainerClient(trainer_service_pb2_grpc.TrainerServiceStub(channel))
