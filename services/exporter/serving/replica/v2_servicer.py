"""Runs in: a Serve replica.

The gRPC shell of the v2 data plane: inference.GRPCInferenceService (and grpc.health.v1) over
a DataPlane.

One shell for every gRPC server of the v2 API: each model replica behind Serve's HAProxy
(model_app.py) and the benchmark's direct baseline. It maps domain errors to status codes (an
unmapped exception would reach the client as INTERNAL with a 2 KB traceback) and answers a
body that did not parse (grpc_services.Undecodable) with INVALID_ARGUMENT. `context` is
grpc.aio's ServicerContext or Serve's gRPCContext: both have set_code and set_details.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc

from paddleray.inference.v2 import grpc_service_pb2 as pb
from paddleray.inference.v2 import grpc_service_pb2_grpc
from paddleray.services.common.errors import DomainError, InvalidArgument
from paddleray.services.exporter.serving.replica.dataplane import DataPlane, describe
from paddleray.services.exporter.serving.replica.grpc_services import HEALTH_SERVICE, INFERENCE_SERVICE, Undecodable

logger = logging.getLogger(__name__)
# How often a health Watch stream looks for a change of status.
WATCH_POLL_S = 1.0


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
            return await self.plane.model_infer(_decoded(request))
        except DomainError as exc:
            _fail(context, exc.code, exc.message)
        except Exception as exc:  # noqa: BLE001 - anything else is ours: a short INTERNAL, logged in full
            logger.exception("ModelInfer failed")
            _fail(context, grpc.StatusCode.INTERNAL, f"internal error: {describe(exc)}")
        return pb.ModelInferResponse()

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context=None
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        async for request in request_iterator:
            if isinstance(request, Undecodable):  # answered in order, the stream goes on
                yield pb.ModelStreamInferResponse(error_message=f"INVALID_ARGUMENT: {_undecodable_message(request)}")
                continue
            async for response in self.plane.model_stream_infer(_one(request)):
                yield response

    # grpc.health.v1.Health: SERVING while the data plane routes `service` ("" for the server, the
    # v2 service's name, or a served model name); SERVICE_UNKNOWN for another name.
    def health(self, request, context):
        from grpc_health.v1 import health_pb2

        status = health_pb2.HealthCheckResponse
        if isinstance(request, Undecodable):
            _fail(context, grpc.StatusCode.INVALID_ARGUMENT, _undecodable_message(request))
            return status()
        service = request.service
        if service in ("", INFERENCE_SERVICE, HEALTH_SERVICE) or service in self.plane.models:
            ready = self.plane.server_ready(pb.ServerReadyRequest()).ready and (
                service not in self.plane.models or bool(self.plane.models[service].versions))
            return status(status=status.SERVING if ready else status.NOT_SERVING)
        return status(status=status.SERVICE_UNKNOWN)

    async def Check(self, request, context):
        return self.health(request, context)

    async def Watch(self, request, context):
        """The status now, then each change (the stream lasts until the client ends it)."""
        last = None
        while True:
            response = self.health(request, context)
            if isinstance(request, Undecodable):
                return
            if response.status != last:
                last = response.status
                yield response
            await asyncio.sleep(WATCH_POLL_S)


def _undecodable_message(request: Undecodable) -> str:
    return f"the request body is not a valid {request.expected} ({request.error})"


def _decoded(request):
    if isinstance(request, Undecodable):
        raise InvalidArgument("request", _undecodable_message(request))
    return request


async def _one(request):
    yield request


def _unary(fn, request, context, empty):
    try:
        return fn(_decoded(request))
    except DomainError as exc:
        _fail(context, exc.code, exc.message)
    except Exception as exc:  # noqa: BLE001 - see ModelInfer
        logger.exception("%s failed", type(request).__name__)
        _fail(context, grpc.StatusCode.INTERNAL, f"internal error: {describe(exc)}")
    return empty()


def _fail(context, code: grpc.StatusCode, details: str) -> None:
    context.set_code(code)
    context.set_details(details)
