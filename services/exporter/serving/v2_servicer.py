"""The gRPC shell of the v2 data plane: inference.GRPCInferenceService over a DataPlane.

One shell for every server of the v2 API: the Serve ingress on Ray Serve's proxy (ingress.py),
each model replica's own endpoint (replica_endpoint.py) and the benchmark's direct baseline.
It maps domain errors to status codes: an unmapped exception would reach the client as
INTERNAL with a 2 KB traceback. `context` is grpc.aio's ServicerContext or Serve's
gRPCContext: both have set_code and set_details.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import grpc

from paddleray.inference.v2 import grpc_service_pb2 as pb
from paddleray.inference.v2 import grpc_service_pb2_grpc
from paddleray.services.common.errors import DomainError
from paddleray.services.exporter.serving.dataplane import DataPlane, describe

logger = logging.getLogger(__name__)


class V2Servicer(grpc_service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self, plane: DataPlane) -> None:
        self.plane = plane

    async def ServerLive(self, request: pb.ServerLiveRequest, context) -> pb.ServerLiveResponse:
        return _unary(self.plane.server_live, request, context, pb.ServerLiveResponse)

    async def ServerReady(self, request: pb.ServerReadyRequest, context) -> pb.ServerReadyResponse:
        return _unary(self.plane.server_ready, request, context, pb.ServerReadyResponse)

    async def ServerMetadata(self, request: pb.ServerMetadataRequest, context) -> pb.ServerMetadataResponse:
        return _unary(self.plane.server_metadata, request, context, pb.ServerMetadataResponse)

    async def ModelReady(self, request: pb.ModelReadyRequest, context) -> pb.ModelReadyResponse:
        return _unary(self.plane.model_ready, request, context, pb.ModelReadyResponse)

    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context) -> pb.ModelMetadataResponse:
        return _unary(self.plane.model_metadata, request, context, pb.ModelMetadataResponse)

    async def ModelInfer(self, request: pb.ModelInferRequest, context) -> pb.ModelInferResponse:
        try:
            return await self.plane.model_infer(request)
        except DomainError as exc:
            _fail(context, exc.code, exc.message)
        except Exception as exc:  # noqa: BLE001 - anything else is ours: a short INTERNAL, logged in full
            logger.exception("ModelInfer failed")
            _fail(context, grpc.StatusCode.INTERNAL, f"internal error: {describe(exc)}")
        return pb.ModelInferResponse()

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context=None
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        async for response in self.plane.model_stream_infer(request_iterator):
            yield response


def _unary(fn, request, context, empty):
    try:
        return fn(request)
    except DomainError as exc:
        _fail(context, exc.code, exc.message)
    except Exception as exc:  # noqa: BLE001 - see ModelInfer
        logger.exception("%s failed", type(request).__name__)
        _fail(context, grpc.StatusCode.INTERNAL, f"internal error: {describe(exc)}")
    return empty()


def _fail(context, code: grpc.StatusCode, details: str) -> None:
    context.set_code(code)
    context.set_details(details)
