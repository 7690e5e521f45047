"""Run by test_restart.py in a process of its own (it needs Ray heads of its own, not the session's):
serve, kill the Ray head, start a new one, then start() + apply() again as the exporter's
reconcile does; prints one JSON line with what it saw."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import grpc
import numpy as np
import ray

from paddleray.inference.v2 import grpc_service_pb2_grpc
from paddleray.services.exporter.serving.control.controller import ServingController
from paddleray.services.exporter.serving.replica import codec
from paddleray.services.exporter.serving.spec import ServedModel, ServedVersion
from paddleray.services.localstack.ports import free_port
from paddleray.services.localstack.ray_head import RayHead
from support.away_codes import away_code  # tests/ is on PYTHONPATH (test_restart.py)


def infer(port: int) -> list[float]:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
        response = stub.ModelInfer(codec.encode_request("mlp", {"x": np.ones((1, 64), np.float32)}), timeout=60,
                                   metadata=(("application", "mlp"),))
    return codec.decode_response(response)["fetch_name_0"].ravel().tolist()


def infer_rest(port: int) -> list[float]:
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32", "data": [1.0] * 64}]}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/mlp/infer", body,
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())["outputs"][0]["data"]


def connect(address: str, attempts: int = 6) -> None:
    """ray.init, again while a just-started head's raylet has not registered (its GCS port opens first)."""
    for attempt in range(attempts):
        try:
            ray.init(address=address, log_to_driver=False)
            return
        except ConnectionError:
            if attempt == attempts - 1:
                raise
            time.sleep(5)


class ClientLoop:
    """One thread calling ModelInfer on a port until stopped; counts the status codes it got."""

    def __init__(self, port: int) -> None:
        self.codes: Counter[str] = Counter()
        self.details: dict[str, str] = {}  # the first details of each code other than OK
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(port,), daemon=True)
        self._thread.start()

    def _run(self, port: int) -> None:
        request = codec.encode_request("mlp", {"x": np.ones((1, 64), np.float32)})
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
            while not self._stop.is_set():
                try:
                    stub.ModelInfer(request, timeout=5, metadata=(("application", "mlp"),))
                    self.codes["OK"] += 1
                except grpc.RpcError as exc:
                    code = away_code(exc)
                    self.codes[code] += 1
                    self.details.setdefault(code, f"{exc.details()} {exc.debug_error_string()}"[:600])
                    time.sleep(0.05)

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        return dict(self.codes)


def crash(head: RayHead) -> None:
    """SIGKILL to the head's process group (GCS, raylet, ...): its workers die with the raylet,
    and their HAProxy lives on until the head is stopped or started again (reap_haproxy)."""
    assert head.process is not None
    os.killpg(head.process.pid, signal.SIGKILL)
    head.process.wait()
    head.process = None


def foreign_listener(port: int) -> socket.socket:
    """Another program on the port (with SO_REUSEADDR and SO_REUSEPORT, as a grpc server binds
    by default). Without SO_REUSEADDR the bind fails on the connections the crashed head's
    endpoint left in TIME_WAIT (CI: EADDRINUSE just after `bindable`, which sets it, said free)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen()
    return listener


def main(artifact_dir: str, workdir: str) -> None:
    models = [ServedModel("mlp", [ServedVersion("1", artifact_dir)], num_cpus=0.1)]
    ctl = ServingController(grpc_port=free_port(), http_port=free_port(), deploy_timeout_s=240)
    seen = {}
    head = RayHead(num_cpus=2, log_file=Path(workdir) / "ray1.log").start()
    connect(head.address)
    asyncio.run(ctl.start())
    ports = [ctl.grpc_port, ctl.http_port]
    asyncio.run(ctl.apply(models))
    seen["before"] = infer(ctl.grpc_port)
    seen["rest_before"] = infer_rest(ctl.http_port)
    # A second controller in the same cluster (an exporter restart) attaches and changes nothing.
    again = ServingController(grpc_port=ctl.grpc_port, http_port=ctl.http_port)
    asyncio.run(again.start())
    seen["after_attach"] = infer(ctl.grpc_port)
    seen["rest_after_attach"] = infer_rest(ctl.http_port)
    # The head crashes under a client's load (issue 21.12: what the client is told meanwhile).
    loop = ClientLoop(ctl.grpc_port)
    time.sleep(1.0)
    crash(head)
    time.sleep(3.0)
    seen["during_crash"] = loop.stop()
    seen["during_crash_details"] = loop.details
    ray.shutdown()
    # What a supervisor does with a crashed head (the local stack's down/up, a test's fixture).
    head.stop()
    from paddleray.services.exporter.serving.control.ports import bindable

    deadline = time.monotonic() + 60
    while not (bindable("127.0.0.1", ports[0]) and bindable("127.0.0.1", ports[1])):
        assert time.monotonic() < deadline, "the crashed head's workers still hold its ports after 60 s"
        time.sleep(0.5)
    # Another program takes the gRPC port while the head is away (issue 21.1): Serve on the new
    # head must not share it, and the endpoint moves, saying so.
    held = foreign_listener(ports[0])
    head = RayHead(num_cpus=2, log_file=Path(workdir) / "ray2.log").start()
    try:
        connect(head.address)
        asyncio.run(ctl.start())
        asyncio.run(ctl.apply(models))
        seen["after_restart"] = infer(ctl.grpc_port)
        seen["rest_after_restart"] = infer_rest(ctl.http_port)
        seen["grpc_port_moved"] = ctl.grpc_port != ports[0]
        seen["http_port_kept"] = ctl.http_port == ports[1]
        seen["note"] = ctl.endpoint_note
        # The foreign listener still has the old port to itself: a connection there reaches it.
        probe = socket.create_connection(("127.0.0.1", ports[0]), timeout=5)
        accepted, _ = held.accept()
        seen["old_port_is_the_other_programs"] = True
        accepted.close()
        probe.close()
        seen["status"] = asyncio.run(ctl.status())["mlp"].versions["1"].state
        asyncio.run(ctl.stop(shutdown_serve=True))
    finally:
        held.close()
        ray.shutdown()
        head.stop()
    print(json.dumps(seen))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
