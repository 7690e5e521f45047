"""Dynamic batching through Serve: concurrent requests of different sizes, stacked into shared
predictor calls by the ingress (Serve's proxy) or by the replica (the model's own endpoint),
each get exactly their own rows back; autoscaling accepted."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np

from paddleray.inference.v2 import grpc_service_pb2_grpc
from paddleray.services.exporter.serving import codec
from paddleray.services.exporter.serving.spec import Autoscaling, Batching, ServedModel, ServedVersion
from paddleray.services.localstack.ports import free_port
from support.serving import dynamic_forward


def test_batched_requests_get_their_own_rows(controller, stub, artifacts):
    version = ServedVersion(
        "1", str(artifacts["mlp1"][0]), num_cpus=0.1, batching=Batching(16, 0.02), autoscaling=Autoscaling(1, 2, 4)
    )
    port = free_port()
    asyncio.run(controller.apply([ServedModel("mlp", [version], direct_port=port)]))
    rng = np.random.default_rng(7)
    cases = [rng.standard_normal((int(rng.integers(1, 4)), 64)).astype(np.float32) for _ in range(96)]
    model = artifacts["mlp1"][1]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        for path in (stub, grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)):

            def call(x, path=path):
                response = path.ModelInfer(codec.encode_request("mlp", {"x": x}), timeout=60)
                return codec.decode_response(response)["fetch_name_0"]

            with ThreadPoolExecutor(16) as pool:
                outputs = list(pool.map(call, cases))
            for x, out in zip(cases, outputs, strict=True):
                np.testing.assert_allclose(out, dynamic_forward(model, x)[0], rtol=1e-5, atol=1e-5)
    status = asyncio.run(controller.status())["mlp"].versions["1"]
    assert status.state == "READY" and 1 <= status.running_replicas <= 2
