"""The warm pool on the 2-CPU head: idle groups make room for other shapes and expire."""

from __future__ import annotations

import time

import pytest
import ray

from paddleray.services.trainer import metrics
from paddleray.trainer.v1 import run_pb2, trainer_service_pb2
from support import wait_until

pytestmark = pytest.mark.integration


def test_idle_groups_are_evicted_for_a_run_of_another_shape(client, trainer):
    pair = client.wait_done(client.start("hello", {"lines": 0}, num_workers=2).name)
    assert pair.state == run_pb2.RUN_STATE_SUCCEEDED
    # The idle pair holds both CPUs; a single worker of a new shape still runs.
    spec = client.spec("hello", {"lines": 0})
    spec.runtime_env.env_vars["SHAPE"] = "other"
    single = client.stub.StartRun(trainer_service_pb2.StartRunRequest(spec=spec)).run
    assert client.wait_done(single.name).state == run_pb2.RUN_STATE_SUCCEEDED
    assert not client.get(single.name).workers[0].warm
    # Idle reservations count as available: nothing runs, so everything is available (once
    # Ray has taken back what the evicted pair held: its resource view lags a little).
    def resources():
        found = client.stub.GetClusterResources(trainer_service_pb2.GetClusterResourcesRequest())
        return found if found.available.num_cpus == 2 else None

    found = wait_until(resources, timeout=60, message="every CPU to count as available")
    assert found.available.num_cpus == found.total.num_cpus == 2


def test_idle_groups_are_released_after_their_ttl(client, trainer):
    client.wait_done(client.start("hello", {"lines": 0}).name)
    assert trainer.pool.idle_count() >= 1
    released = trainer.pool.reap(now=time.monotonic() + trainer.pool.idle_ttl_s + 1)
    assert released >= 1 and trainer.pool.idle_count() == 0
    assert metrics.POOL_IDLE_GROUPS._value.get() == 0
    wait_until(lambda: ray.available_resources().get("CPU", 0) == 2, timeout=60, message="the CPUs to be free")


def test_idle_groups_make_room_for_other_work_waiting_on_the_cluster(client, trainer):
    # An idle pair holds both CPUs; a task of another driver (here the test process: in the
    # stack, an export or a Serve replica) waits in Ray's demand and the pool lets go at once,
    # long before the TTL.
    assert trainer.pool.idle_ttl_s >= 60
    pair = client.wait_done(client.start("hello", {"lines": 0}, num_workers=2).name)
    assert pair.state == run_pb2.RUN_STATE_SUCCEEDED and trainer.pool.idle_count() >= 1
    yielded = metrics.POOL_REQUESTS.labels(result="yielded")._value.get()

    @ray.remote(num_cpus=1)
    def elsewhere() -> str:
        return "ran"

    started = time.monotonic()
    assert ray.get(elsewhere.remote(), timeout=60) == "ran"
    assert time.monotonic() - started < trainer.pool.idle_ttl_s / 2
    assert metrics.POOL_REQUESTS.labels(result="yielded")._value.get() > yielded
