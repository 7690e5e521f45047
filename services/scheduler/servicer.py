"""JobService: translates protos to JobManager calls and back, nothing more.

Each method reads the call's caller once (identity.of_call()) and passes it; the tenant rules
are the domain's (JobManager, scheduler/tenancy.py).
"""

from __future__ import annotations

from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.scheduler.v1 import job_service_pb2_grpc
from paddleray.services.common.identity import of_call
from paddleray.services.scheduler.job_logs import JobLogs
from paddleray.services.scheduler.jobs import JobManager


class JobServicer(job_service_pb2_grpc.JobServiceServicer):
    def __init__(self, manager: JobManager, logs: JobLogs) -> None:
        self.manager = manager
        self.logs = logs

    async def CreateJob(self, request: js.CreateJobRequest, context) -> js.CreateJobResponse:
        job = request.job if request.HasField("job") else None
        created = await self.manager.create(job, request.job_id, request.request_id, caller=of_call())
        return js.CreateJobResponse(job=created)

    async def GetJob(self, request: js.GetJobRequest, context) -> js.GetJobResponse:
        return js.GetJobResponse(job=await self.manager.get(request.name, caller=of_call()))

    async def ListJobs(self, request: js.ListJobsRequest, context) -> js.ListJobsResponse:
        jobs, token = await self.manager.list(request.page_size, request.page_token, list(request.states),
                                              dict(request.labels), request.experiment, request.tenant, request.view,
                                              caller=of_call())
        return js.ListJobsResponse(jobs=jobs, next_page_token=token)

    async def CancelJob(self, request: js.CancelJobRequest, context) -> js.CancelJobResponse:
        return js.CancelJobResponse(job=await self.manager.cancel(request.name, request.reason, caller=of_call()))

    async def DeleteJob(self, request: js.DeleteJobRequest, context) -> js.DeleteJobResponse:
        await self.manager.delete(request.name, caller=of_call())
        return js.DeleteJobResponse()

    async def WatchJob(self, request: js.WatchJobRequest, context):
        async for event in self.manager.watch(request.name, request.after_sequence, caller=of_call()):
            yield js.WatchJobResponse(event=event)

    async def GetJobLogs(self, request: js.GetJobLogsRequest, context):
        rank = request.rank if request.HasField("rank") else None
        async for lines in self.logs.stream(request.name, request.attempt, rank, request.tail_lines, request.follow,
                                            caller=of_call()):
            yield js.GetJobLogsResponse(lines=lines)
