"""JobService: translates protos to JobManager calls and back, nothing more."""

from __future__ import annotations

import grpc
from grpc import aio

from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.scheduler.v1 import job_service_pb2_grpc
from paddleray.services.common import errors
from paddleray.services.scheduler.jobs import JobManager
from paddleray.services.scheduler.trainer_client import TrainerClient
from paddleray.trainer.v1 import trainer_service_pb2 as ts


class JobServicer(job_service_pb2_grpc.JobServiceServicer):
    def __init__(self, manager: JobManager, trainer: TrainerClient | None = None) -> None:
        self.manager = manager
        self.trainer = trainer

    async def CreateJob(self, request: js.CreateJobRequest, context) -> js.CreateJobResponse:
        job = request.job if request.HasField("job") else None
        return js.CreateJobResponse(job=await self.manager.create(job, request.job_id, request.request_id))

    async def GetJob(self, request: js.GetJobRequest, context) -> js.GetJobResponse:
        return js.GetJobResponse(job=await self.manager.get(request.name))

    async def ListJobs(self, request: js.ListJobsRequest, context) -> js.ListJobsResponse:
        jobs, token = await self.manager.list(request.page_size, request.page_token, list(request.states),
                                              dict(request.labels), request.experiment, request.tenant)
        return js.ListJobsResponse(jobs=jobs, next_page_token=token)

    async def CancelJob(self, request: js.CancelJobRequest, context) -> js.CancelJobResponse:
        return js.CancelJobResponse(job=await self.manager.cancel(request.name, request.reason))

    async def DeleteJob(self, request: js.DeleteJobRequest, context) -> js.DeleteJobResponse:
        await self.manager.delete(request.name)
        return js.DeleteJobResponse()

    async def WatchJob(self, request: js.WatchJobRequest, context):
        async for event in self.manager.watch(request.name, request.after_sequence):
            yield js.WatchJobResponse(event=event)

    async def GetJobLogs(self, request: js.GetJobLogsRequest, context):
        job = await self.manager.get(request.name)
        if request.attempt < 0:
            raise errors.InvalidArgument("attempt", "must be >= 0 (0 means the newest)")
        if request.tail_lines < 0:
            raise errors.InvalidArgument("tail_lines", "must be >= 0")
        if not job.attempts or not job.attempts[-1].run:
            raise errors.FailedPrecondition(f"{job.name} has not started yet")
        if request.attempt > len(job.attempts):
            raise errors.NotFound(f"{job.name} has no attempt {request.attempt}")
        run = job.attempts[request.attempt - 1 if request.attempt else -1].run
        if not run or self.trainer is None:
            raise errors.FailedPrecondition(f"attempt {request.attempt} of {job.name} has no trainer run")
        proxied = ts.GetRunLogsRequest(name=run, tail_lines=request.tail_lines, follow=request.follow)
        if request.HasField("rank"):
            proxied.rank = request.rank
        try:
            async for response in self.trainer.run_logs(proxied):
                yield js.GetJobLogsResponse(lines=response.lines)
        except aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                raise errors.NotFound(f"the trainer no longer has the logs of {run}") from exc
            raise errors.Unavailable(f"the trainer could not be reached: {exc.code().name}") from exc
