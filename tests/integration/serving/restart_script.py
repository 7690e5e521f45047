"""Run by test_restart.py in a process of its own (it needs Ray heads of its own, not the session's):
serve, kill the Ray head, start a new one, then start() + apply() again as the exporter's
reconcile does; prints one JSON line with what it saw."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import grpc
import numpy as np
import ray

from paddleray.inference.v2 import grpc_service_pb2_grpc
from paddleray.services.exporter.serving import codec
from paddleray.services.exporter.serving.controller import ServingController
from paddleray.services.exporter.serving.spec import ServedModel, ServedVersion
from paddleray.services.localstack.ports import free_port
from paddleray.services.localstack.ray_head import RayHead


def infer(port: int) -> list[float]:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
        response = stub.ModelInfer(codec.encode_request("mlp", {"x": np.ones((1, 64), np.float32)}), timeout=60)
    return codec.decode_response(response)["fetch_name_0"].ravel().tolist()


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


def main(artifact_dir: str, workdir: str) -> None:
    direct = free_port()  # the model's own endpoint: its replicas listen there again after the restart
    models = [ServedModel("mlp", [ServedVersion("1", artifact_dir, num_cpus=0.1)], direct_port=direct)]
    ctl = ServingController(grpc_port=free_port(), http_port=free_port(), deploy_timeout_s=240)
    seen = {}
    head = RayHead(num_cpus=2, log_file=Path(workdir) / "ray1.log").start()
    connect(head.address)
    asyncio.run(ctl.start())
    asyncio.run(ctl.apply(models))
    seen["before"] = infer(ctl.grpc_port)
    seen["direct_before"] = infer(direct)
    # A second controller in the same cluster (an exporter restart) attaches and changes nothing.
    again = ServingController(grpc_port=ctl.grpc_port, http_port=ctl.http_port)
    asyncio.run(again.start())
    seen["after_attach"] = infer(ctl.grpc_port)
    seen["direct_after_attach"] = infer(direct)
    head.stop()
    ray.shutdown()
    head = RayHead(num_cpus=2, log_file=Path(workdir) / "ray2.log").start()
    try:
        connect(head.address)
        asyncio.run(ctl.start())
        asyncio.run(ctl.apply(models))
        seen["after_restart"] = infer(ctl.grpc_port)
        seen["direct_after_restart"] = infer(direct)
        seen["status"] = asyncio.run(ctl.status())["mlp"].versions["1"].state
        asyncio.run(ctl.stop(shutdown_serve=True))
    finally:
        ray.shutdown()
        head.stop()
    print(json.dumps(seen))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
