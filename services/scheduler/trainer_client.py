"""The scheduler's client of the trainer service: one grpc.aio channel, deadlines, auth."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
from grpc import aio

from paddleray.trainer.v1 import run_pb2, trainer_service_pb2_grpc
from paddleray.trainer.v1 import trainer_service_pb2 as ts

# Errors that say the trainer (or its link) is down for now, not that the request is wrong.
TRANSIENT = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                       grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ABORTED,
                       grpc.StatusCode.CANCELLED, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN})


class TrainerClient:
    """Must be created on the event loop that uses it (grpc.aio channels bind to one)."""

    def __init__(self, address: str, token: str = "", rpc_timeout_s: float = 30.0) -> None:
        self.channel = aio.insecure_channel(address, options=[("grpc.keepalive_time_ms", 30_000)])
        self.stub = trainer_service_pb2_grpc.TrainerServiceStub(self.channel)
        self.metadata = (("authorization", f"Bearer {token}"),) if token else None
        self.timeout = rpc_timeout_s

    async def start_run(self, request: ts.StartRunRequest) -> run_pb2.Run:
        return (await self.stub.StartRun(request, timeout=self.timeout, metadata=self.metadata)).run

    async def get_run(self, name: str) -> run_pb2.Run:
        response = await self.stub.GetRun(ts.GetRunRequest(name=name), timeout=self.timeout, metadata=self.metadata)
        return response.run

    async def stop_run(self, name: str, reason: str, grace_s: float) -> run_pb2.Run:
        request = ts.StopRunRequest(name=name, reason=reason)
        request.grace_period.FromNanoseconds(int(grace_s * 1e9))
        return (await self.stub.StopRun(request, timeout=self.timeout, metadata=self.metadata)).run

    async def watch_run(self, name: str, after_sequence: int) -> AsyncIterator[run_pb2.RunEvent]:
        call = self.stub.WatchRun(ts.WatchRunRequest(name=name, after_sequence=after_sequence), metadata=self.metadata)
        try:
            async for response in call:
                yield response.event
        finally:
            call.cancel()

    def run_logs(self, request: ts.GetRunLogsRequest):
        return self.stub.GetRunLogs(request, metadata=self.metadata)

    async def cluster_resources(self) -> ts.GetClusterResourcesResponse:
        return await self.stub.GetClusterResources(
            ts.GetClusterResourcesRequest(), timeout=self.timeout, metadata=self.metadata
        )

    async def close(self) -> None:
        await self.channel.close()
