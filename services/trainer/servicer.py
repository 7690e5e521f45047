"""TrainerService: proto -> Trainer call -> proto, nothing more.

Each method reads the call's caller once (identity.of_call()) and passes it; the tenant rules
are the domain's (Trainer, references.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from grpc import aio

from paddleray.services.common import idempotency
from paddleray.services.common.identity import of_call
from paddleray.services.trainer import convert
from paddleray.services.trainer.trainer import Trainer
from paddleray.trainer.v1 import trainer_service_pb2 as pb
from paddleray.trainer.v1 import trainer_service_pb2_grpc


class TrainerServicer(trainer_service_pb2_grpc.TrainerServiceServicer):
    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer

    async def StartRun(self, request: pb.StartRunRequest, context: aio.ServicerContext) -> pb.StartRunResponse:
        record = await self._trainer.start_run(
            request.spec,
            run_id=request.run_id,
            request_id=request.request_id,
            job=request.job,
            timeout_s=convert.duration_seconds(request.timeout, "timeout") if request.HasField("timeout") else None,
            resume_from=request.resume_from if request.HasField("resume_from") else None,
            labels=dict(request.labels),
            tenant=request.tenant,
            # A retry recomputes its relative timeout (what is left of the job's): not compared.
            fingerprint=lambda tenant: idempotency.of_request(request, ignore=("timeout",), tenant=tenant),
            caller=of_call(),
        )
        return pb.StartRunResponse(run=convert.run(record))

    async def GetRun(self, request: pb.GetRunRequest, context: aio.ServicerContext) -> pb.GetRunResponse:
        return pb.GetRunResponse(run=convert.run(self._trainer.get_run(request.name, caller=of_call())))

    async def ListRuns(self, request: pb.ListRunsRequest, context: aio.ServicerContext) -> pb.ListRunsResponse:
        records, token = self._trainer.list_runs(
            request.page_size, request.page_token, [convert.state_from_proto(s) for s in request.states], request.job,
            request.tenant, caller=of_call(),
        )
        return pb.ListRunsResponse(runs=convert.runs_shown(records), next_page_token=token)

    async def StopRun(self, request: pb.StopRunRequest, context: aio.ServicerContext) -> pb.StopRunResponse:
        grace = convert.duration_seconds(request.grace_period, "grace_period") if request.HasField("grace_period") else None
        record = await self._trainer.stop_run(request.name, grace, request.reason, caller=of_call())
        return pb.StopRunResponse(run=convert.run(record))

    async def WatchRun(self, request: pb.WatchRunRequest, context: aio.ServicerContext) -> AsyncIterator[pb.WatchRunResponse]:
        async for event in self._trainer.watch(request.name, request.after_sequence, caller=of_call()):
            yield pb.WatchRunResponse(event=convert.event(event))

    async def GetRunLogs(
        self, request: pb.GetRunLogsRequest, context: aio.ServicerContext
    ) -> AsyncIterator[pb.GetRunLogsResponse]:
        rank = request.rank if request.HasField("rank") else None
        async for lines in self._trainer.logs(request.name, rank, request.tail_lines, request.follow, caller=of_call()):
            yield pb.GetRunLogsResponse(lines=[convert.log_line(line) for line in lines])

    async def GetClusterResources(
        self, request: pb.GetClusterResourcesRequest, context: aio.ServicerContext
    ) -> pb.GetClusterResourcesResponse:
        return convert.cluster(await self._trainer.cluster_resources())
