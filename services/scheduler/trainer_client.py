"""The scheduler's client of the trainer service: one grpc.aio channel, deadlines, and the
scheduler's own service credential (its bearer token, TLS / mTLS as configured)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import grpc
from grpc import aio

from paddleray.services.common.peers import PeerSettings
from paddleray.trainer.v1 import run_pb2, trainer_service_pb2_grpc
from paddleray.trainer.v1 import trainer_service_pb2 as ts

log = logging.getLogger(__name__)

# Answers that say the trainer (or its link) is down or busy for now: the same request may
# pass later. INTERNAL and UNKNOWN are not among them: they say the trainer failed on this
# request, and asking again at once would only repeat it.
TRANSIENT = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                       grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ABORTED})
# Answers that say the trainer failed on this request (possibly a bug that a later attempt
# avoids): they fail the attempt, which the job's retry policy may retry. Any other code is a
# refusal of the request itself (INVALID_ARGUMENT, PERMISSION_DENIED, ...) and fails the job.
TRAINER_FAILED = frozenset({grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DATA_LOSS})


class TrainerClient:
    """Must be created on the event loop that uses it (grpc.aio channels bind to one)."""

    def __init__(self, trainer: PeerSettings) -> None:
        self.channel = trainer.dial()
        self.stub = trainer_service_pb2_grpc.TrainerServiceStub(self.channel)
        self.timeout = trainer.rpc_timeout_s

    async def start_run(self, request: ts.StartRunRequest) -> run_pb2.Run:
        return (await self.stub.StartRun(request, timeout=self.timeout)).run

    async def get_run(self, name: str) -> run_pb2.Run:
        response = await self.stub.GetRun(ts.GetRunRequest(name=name), timeout=self.timeout)
        return response.run

    async def stop_run(self, name: str, reason: str, grace_s: float) -> run_pb2.Run:
        request = ts.StopRunRequest(name=name, reason=reason)
        request.grace_period.FromNanoseconds(int(grace_s * 1e9))
        return (await self.stub.StopRun(request, timeout=self.timeout)).run

    async def request_stop(self, name: str, reason: str, grace_s: float) -> None:
        """StopRun, best effort: a failure is logged, since the run's follower stops the run
        too once it sees the job's stop intent."""
        try:
            await self.stop_run(name, reason, grace_s)
        except aio.AioRpcError as exc:
            log.warning("StopRun of %s failed: %s", name, exc.code().name)

    async def watch_run(self, name: str, after_sequence: int) -> AsyncIterator[run_pb2.RunEvent]:
        call = self.stub.WatchRun(ts.WatchRunRequest(name=name, after_sequence=after_sequence))
        try:
            async for response in call:
                yield response.event
        finally:
            call.cancel()

    def run_logs(self, request: ts.GetRunLogsRequest):
        return self.stub.GetRunLogs(request)

    async def cluster_resources(self) -> ts.GetClusterResourcesResponse:
        return await self.stub.GetClusterResources(
            ts.GetClusterResourcesRequest(), timeout=self.timeout
        )

    async def close(self) -> None:
        await self.channel.close()
