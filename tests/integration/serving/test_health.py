"""HEALTHY means a request sent to the endpoints a deployment shows would be answered (issue 21.10):
not while its only replica is dead (Serve noticed it 7 s later), not before the endpoint answers;
and a client sent there meanwhile is told UNAVAILABLE (or runs into its deadline), never INTERNAL
or UNKNOWN."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import grpc
import numpy as np
import pytest

from paddleray.services.exporter.serving.control.controller import ServingController
from paddleray.services.exporter.serving.replica import codec
from paddleray.services.exporter.serving.spec import ServedModel, ServedVersion
from paddleray.services.localstack.ports import free_port
from support.serving import application_channel, v2_stub


def _replicas(app: str) -> list[dict]:
    from paddleray.services.common import ray_private

    details = ray_private.serve_details()
    return [r for r in details["applications"][app]["deployments"]["Model"]["replicas"] if r["state"] == "RUNNING"]


def test_ready_only_where_clients_are_answered(controller, artifacts):
    asyncio.run(controller.apply([ServedModel("fragile", [ServedVersion("1", str(artifacts["mlp1"][0]))],
                                              num_cpus=0.1)]))
    assert asyncio.run(controller.status())["fragile"].versions["1"].state == "READY"
    # The same Serve asked at endpoints nothing answers on: not READY, and it says where.
    elsewhere = ServingController(grpc_port=controller.grpc_port, http_port=controller.http_port,
                                  endpoints=lambda: (f"127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"))
    version = asyncio.run(elsewhere.status())["fragile"].versions["1"]
    assert version.state == "UNHEALTHY" and "not answering on the gRPC endpoint" in version.message

    # The only replica dies: not READY at once (before Serve's health check notices), and the
    # client is told UNAVAILABLE until Serve has replaced it.
    [replica] = _replicas("fragile")
    os.kill(replica["pid"], signal.SIGKILL)
    version = asyncio.run(controller.status())["fragile"].versions["1"]
    assert version.state != "READY", version
    codes: dict[str, int] = {}
    request = codec.encode_request("fragile", {"x": np.zeros((1, 64), np.float32)})
    deadline = time.monotonic() + 180
    with application_channel(f"127.0.0.1:{controller.grpc_port}", "fragile") as channel:
        stub = v2_stub(channel)
        while True:
            try:
                stub.ModelInfer(request, timeout=10)
                break
            except grpc.RpcError as exc:
                codes[exc.code().name] = codes.get(exc.code().name, 0) + 1
            assert time.monotonic() < deadline, f"the replica was not replaced; codes seen: {codes}"
            time.sleep(0.1)
    # UNAVAILABLE; or the client's own deadline when Serve's fallback proxy (HAProxy's backup
    # server while an app has no replica) held the call for a replica to come: never an error
    # of ours or Ray's text.
    assert set(codes) <= {"UNAVAILABLE", "DEADLINE_EXCEEDED"}, codes
    deadline = time.monotonic() + 60
    while asyncio.run(controller.status())["fragile"].versions["1"].state != "READY":
        assert time.monotonic() < deadline
        time.sleep(0.5)


@pytest.fixture(autouse=True)
def _remove_fragile(controller):
    yield
    asyncio.run(controller.apply([]))
