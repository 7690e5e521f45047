"""Issue 21 point 3: the exporter after a Ray head crash, again and again.

A real exporter process, under the local stack's supervisor as `paddleray up` runs it
(services/localstack/supervisor.py), serves a real model through Ray Serve's HAProxy on a Ray
head of the test's own (2 CPUs, a fixed port). Each round SIGKILLs the head's process group
(GCS, raylet, Serve's controller and replicas with it; not a clean stop) and starts the head
again on the same port: the exporter marks the deployment UNHEALTHY, exits with
entry.EXIT_RAY_LOST so that it reconnects in a fresh process (a process that held a driver of
the dead cluster died of SIGSEGV reconnecting in 1 of 2 runs), the supervisor starts it again
on its old port, and it deploys the recorded deployment again: an inference answers after every
crash, with the model's own outputs. While serving is away, a client sees UNAVAILABLE (or its
deadline), never INTERNAL or UNKNOWN (Serve's HAProxy answers 503 through paddleray-haproxy);
NOT_FOUND before the app is deployed again is let through by name (support/away_codes.py) and
counted in the figures.

Rounds: CRASH_ROUNDS (2 at CI size, 10 in the soak profile, PADDLERAY_SOAK=1); per round, the
time from the crash and from the head's restart (its `ray start` up again) to the first OK
inference, with their median and max, are recorded for docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import statistics
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import redis.asyncio as aioredis

from paddleray.common.v1 import common_pb2
from paddleray.exporter.v1 import deployment_pb2, exporter_service_pb2_grpc
from paddleray.exporter.v1 import exporter_service_pb2 as es
from paddleray.inference.v2 import grpc_service_pb2_grpc
from paddleray.services.common.entry import EXIT_RAY_LOST
from paddleray.services.exporter.serving.replica import codec
from paddleray.services.exporter.store.registry_store import RegistryStore
from paddleray.services.localstack.ray_head import RayHead
from paddleray.services.localstack.redis_process import RedisProcess
from reliability.harness import soak
from support import free_port, wait_until
from support.away_codes import AWAY, away_code
from support.exporter import ExporterProcess, ready_version
from support.serving import export_model

CRASH_ROUNDS = 10 if soak() else 2
# Bounds, not expectations: on a loaded 2-core machine a fresh head, the exporter's start and
# Serve's controller, HAProxy and replica each take their time.
BACK_S = 600
pytestmark = [pytest.mark.timeout(300 + BACK_S * CRASH_ROUNDS)]
D = deployment_pb2.DeploymentState


async def _ready_version(redis_url: str, storage_root: Path) -> int:
    client = aioredis.Redis.from_url(redis_url)
    try:
        return await ready_version(RegistryStore(client), storage_root, "mlp")
    finally:
        await client.aclose()


def _infer(stub, codes: collections.Counter, details: dict[str, str] | None = None) -> list[float] | None:
    """One inference through the HAProxy endpoint; None (its code counted, the first details of
    each code kept) if it fails."""
    request = codec.encode_request("mlp", {"x": np.ones((1, 64), np.float32)})
    try:
        response = stub.ModelInfer(request, timeout=5, metadata=(("application", "mlp"),))
    except grpc.RpcError as exc:
        code = away_code(exc)
        codes[code] += 1
        if details is not None:
            details.setdefault(code, (exc.details() or "")[:300])
        return None
    return codec.decode_response(response)["fetch_name_0"].ravel().tolist()


def _served(exporter: ExporterProcess, away: collections.Counter, details: dict[str, str]) -> list[float] | None:
    """An inference at the endpoint the deployment shows once HEALTHY (it moves, saying so, when
    another program took the port while the head was away: on a shared host another test's
    Serve may, and it may serve a model of the same name); None before."""
    try:
        with grpc.insecure_channel(exporter.address) as channel:
            shown = exporter_service_pb2_grpc.ExporterServiceStub(channel).GetDeployment(
                es.GetDeploymentRequest(name="deployments/mlp"), timeout=10).deployment
    except grpc.RpcError:
        return None  # the exporter is restarting
    with grpc.insecure_channel(shown.endpoint) as channel:
        answer = _infer(grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel), away, details)
    return answer if answer is not None and shown.state == D.DEPLOYMENT_STATE_HEALTHY else None


def _crash(head: RayHead) -> None:
    assert head.process is not None
    os.killpg(head.process.pid, signal.SIGKILL)
    head.process.wait()
    head.process = None


def test_serving_is_back_after_every_sigkill_of_the_ray_head(tmp_path, fault_figures):
    store = RedisProcess(tmp_path / "redis", durable=True).start()
    head = RayHead(num_cpus=2, port=free_port(), log_file=tmp_path / "ray-head.log").start(timeout=BACK_S)
    storage = tmp_path / "storage"
    inference_port = free_port()
    exporter = ExporterProcess(store.url, head.address, storage, tmp_path, serving_grpc_port=inference_port,
                               ray_probe_interval_s=0.5, ray_lost_after_s=3, ray_retry_interval_s=1,
                               reconcile_interval_s=1)
    away: collections.Counter = collections.Counter()
    away_details: dict[str, str] = {}
    rounds: list[float] = []
    restarted: list[float] = []  # the head up again -> the first OK inference, per round
    try:
        exporter.wait_serving(timeout=BACK_S)
        address = exporter.address
        number = asyncio.run(_ready_version(store.url, storage))
        export_model(storage / "models" / "mlp" / "versions" / str(number), "mlp", seed=3, version=number)
        with grpc.insecure_channel(address) as channel:
            stub = exporter_service_pb2_grpc.ExporterServiceStub(channel)
            deployment = deployment_pb2.Deployment(
                serving_name="mlp", resources_per_replica=common_pb2.Resources(num_cpus=0.1),
                traffic=[deployment_pb2.TrafficTarget(model_version=f"models/mlp/versions/{number}", percent=100)])
            stub.CreateDeployment(es.CreateDeploymentRequest(deployment_id="mlp", deployment=deployment), timeout=30)
        expected = wait_until(lambda: _served(exporter, collections.Counter(), {}), timeout=BACK_S, interval=0.5,
                              message=f"the first inference (log: {exporter.log})")
        started = time.monotonic()
        for round_ in range(1, CRASH_ROUNDS + 1):
            before = exporter.service_pid()
            crashed = time.monotonic()
            _crash(head)
            head.start(timeout=BACK_S)
            head_up = time.monotonic()
            try:
                answer = wait_until(lambda: _served(exporter, away, away_details), timeout=BACK_S, interval=0.25,
                                    message=f"an inference after crash {round_}")
            except TimeoutError:
                raise AssertionError(f"no inference after crash {round_}; the exporter's log:\n"
                                     f"{exporter.log.read_text()[-5000:]}") from None
            served_at = time.monotonic()
            rounds.append(round(served_at - crashed, 1))
            restarted.append(round(served_at - head_up, 1))
            assert answer == pytest.approx(expected, rel=1e-5)
            # A fresh exporter process, on its old address, serving (the supervisor kept the port).
            assert exporter.proc.poll() is None, exporter.log.read_text()[-3000:]
            assert exporter.service_pid() not in (None, before), "the exporter was not started again"
            assert exporter.address == address
            exporter.wait_serving(timeout=BACK_S)
        total_s = round(time.monotonic() - started, 1)
        log = exporter.log.read_text()
    finally:
        exporter.stop()
        head.stop()
        store.stop()
    assert set(away) <= AWAY, (dict(away), away_details)
    assert "Segmentation fault" not in log and "Fatal Python error" not in log, log[-5000:]
    restarts = log.count(f"exited with {EXIT_RAY_LOST}: its Ray cluster was lost")
    assert restarts == CRASH_ROUNDS, (restarts, log[-5000:])
    fault_figures.record(faults_injected=CRASH_ROUNDS, head_sigkills=CRASH_ROUNDS, served_again=len(rounds),
                         exporter_restarts=restarts, crash_to_first_inference_s=rounds,
                         crash_to_first_inference_max_s=max(rounds),
                         restart_to_first_inference_s=restarted,
                         restart_to_first_inference_median_s=round(statistics.median(restarted), 1),
                         restart_to_first_inference_max_s=max(restarted), loop_s=total_s,
                         codes_while_away=dict(away))
