"""TrainerService: proto -> Trainer call -> proto, with the tenant rules of common.identity.

A run's tenant is the caller's credential's, or (for an admin: the scheduler's own service
credential) the one StartRunRequest.tenant names, the job's tenant.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from grpc import aio

from paddleray.services.common import idempotency, identity
from paddleray.services.common.identity import Identity, of_call
from paddleray.services.trainer import convert, references
from paddleray.services.trainer.trainer import Trainer
from paddleray.trainer.v1 import trainer_service_pb2 as pb
from paddleray.trainer.v1 import trainer_service_pb2_grpc


class TrainerServicer(trainer_service_pb2_grpc.TrainerServiceServicer):
    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer

    def _visible(self, caller: Identity, name: str):
        record = self._trainer.get_run(name)
        identity.check_visible(caller, record.tenant, name)
        return record

    async def StartRun(self, request: pb.StartRunRequest, context: aio.ServicerContext) -> pb.StartRunResponse:
        caller = of_call()
        identity.require_write(caller, "StartRun")
        tenant = identity.tenant_for_write(caller, request.tenant, "tenant")
        references.check(caller, request.spec, request.resume_from if request.HasField("resume_from") else None,
                         self._trainer.storage_root)
        record = await self._trainer.start_run(
            request.spec,
            run_id=request.run_id,
            request_id=request.request_id,
            job=request.job,
            timeout_s=convert.duration_seconds(request.timeout, "timeout") if request.HasField("timeout") else None,
            resume_from=request.resume_from if request.HasField("resume_from") else None,
            labels=dict(request.labels),
            tenant=tenant,
            # A retry recomputes its relative timeout (what is left of the job's): not compared.
            fingerprint=idempotency.of_request(request, ignore=("timeout",), tenant=tenant),
        )
        if record.tenant != tenant:
            # A repeated request_id returns the run first started with it: not another tenant's.
            raise idempotency.reused()
        return pb.StartRunResponse(run=references.shown(caller, convert.run(record)))

    async def GetRun(self, request: pb.GetRunRequest, context: aio.ServicerContext) -> pb.GetRunResponse:
        caller = of_call()
        return pb.GetRunResponse(run=references.shown(caller, convert.run(self._visible(caller, request.name))))

    async def ListRuns(self, request: pb.ListRunsRequest, context: aio.ServicerContext) -> pb.ListRunsResponse:
        caller = of_call()
        tenant = identity.list_filter(caller, request.tenant)
        if tenant is None:
            return pb.ListRunsResponse()
        records, token = self._trainer.list_runs(
            request.page_size, request.page_token, [convert.state_from_proto(s) for s in request.states], request.job,
            tenant,
        )
        return pb.ListRunsResponse(runs=[references.shown(caller, r) for r in convert.runs_shown(records)], next_page_token=token)

    async def StopRun(self, request: pb.StopRunRequest, context: aio.ServicerContext) -> pb.StopRunResponse:
        caller = of_call()
        identity.require_write(caller, "StopRun")
        self._visible(caller, request.name)
        grace = convert.duration_seconds(request.grace_period, "grace_period") if request.HasField("grace_period") else None
        record = await self._trainer.stop_run(request.name, grace, request.reason)
        return pb.StopRunResponse(run=references.shown(caller, convert.run(record)))

    async def WatchRun(self, request: pb.WatchRunRequest, context: aio.ServicerContext) -> AsyncIterator[pb.WatchRunResponse]:
        self._visible(of_call(), request.name)
        async for event in self._trainer.watch(request.name, request.after_sequence):
            yield pb.WatchRunResponse(event=convert.event(event))

    async def GetRunLogs(
        self, request: pb.GetRunLogsRequest, context: aio.ServicerContext
    ) -> AsyncIterator[pb.GetRunLogsResponse]:
        self._visible(of_call(), request.name)
        rank = request.rank if request.HasField("rank") else None
        async for lines in self._trainer.logs(request.name, rank, request.tail_lines, request.follow):
            yield pb.GetRunLogsResponse(lines=[convert.log_line(line) for line in lines])

    async def GetClusterResources(
        self, request: pb.GetClusterResourcesRequest, context: aio.ServicerContext
    ) -> pb.GetClusterResourcesResponse:
        return convert.cluster(await self._trainer.cluster_resources())
