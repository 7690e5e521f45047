"""The baseline: a minimal grpc.aio server around the same predictor, the same v2 data plane and
gRPC shell (v2_servicer.py), no Ray. python bench/serving_direct.py ARTIFACT_DIR BACKEND MKLDNN(0|1) MODEL_NAME; prints its port.
"""

from __future__ import annotations

import asyncio
import sys

import grpc

from paddleray.inference.v2 import grpc_service_pb2_grpc
from paddleray.services.exporter.serving.artifact import load_artifact
from paddleray.services.exporter.serving.replica.dataplane import DataPlane, RoutedModel, RoutedVersion
from paddleray.services.exporter.serving.replica.predictor import PLATFORMS, load_predictor
from paddleray.services.exporter.serving.replica.v2_servicer import V2Servicer
from paddleray.services.exporter.serving.spec import PredictorOptions


async def main(directory: str, backend: str, mkldnn: bool, name: str) -> None:
    artifact = load_artifact(directory)
    predictor = load_predictor(artifact, backend, PredictorOptions(enable_mkldnn=mkldnn))

    async def run(inputs):
        return predictor.predict(inputs)

    plane = DataPlane()
    plane.swap({name: RoutedModel(name, {"1": RoutedVersion("1", 1.0, artifact.signature, PLATFORMS[backend], run)})})
    server = grpc.aio.server()
    grpc_service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(V2Servicer(plane), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]))
