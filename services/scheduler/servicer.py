"""JobService: translates protos to JobManager calls and back, nothing more."""

from __future__ import annotations

from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.scheduler.v1 import job_service_pb2_grpc
from paddleray.services.common import identity
from paddleray.services.common.identity import of_call
from paddleray.services.scheduler import tenancy
from paddleray.services.scheduler.job_logs import JobLogs
from paddleray.services.scheduler.jobs import JobManager


class JobServicer(job_service_pb2_grpc.JobServiceServicer):
    def __init__(self, manager: JobManager, logs: JobLogs) -> None:
        self.manager = manager
        self.logs = logs

    async def CreateJob(self, request: js.CreateJobRequest, context) -> js.CreateJobResponse:
        job = request.job if request.HasField("job") else None
        caller = of_call()
        tenant = tenancy.prepare_job(caller, job)
        created = await self.manager.create(job, request.job_id, request.request_id, caller=caller)
        tenancy.check_created(tenant, created.tenant)
        return js.CreateJobResponse(job=tenancy.shown(caller, created))

    async def GetJob(self, request: js.GetJobRequest, context) -> js.GetJobResponse:
        caller = of_call()
        return js.GetJobResponse(job=tenancy.shown(caller, await tenancy.visible_job(caller, self.manager, request.name)))

    async def ListJobs(self, request: js.ListJobsRequest, context) -> js.ListJobsResponse:
        caller = of_call()
        tenant = identity.list_filter(caller, request.tenant)
        if tenant is None:
            return js.ListJobsResponse()
        jobs, token = await self.manager.list(request.page_size, request.page_token, list(request.states),
                                              dict(request.labels), request.experiment, tenant, request.view)
        return js.ListJobsResponse(jobs=[tenancy.shown(caller, j) for j in jobs], next_page_token=token)

    async def CancelJob(self, request: js.CancelJobRequest, context) -> js.CancelJobResponse:
        caller = of_call()
        await tenancy.writable_job(caller, self.manager, request.name, "CancelJob")
        return js.CancelJobResponse(job=tenancy.shown(caller, await self.manager.cancel(request.name, request.reason)))

    async def DeleteJob(self, request: js.DeleteJobRequest, context) -> js.DeleteJobResponse:
        await tenancy.writable_job(of_call(), self.manager, request.name, "DeleteJob")
        await self.manager.delete(request.name)
        return js.DeleteJobResponse()

    async def WatchJob(self, request: js.WatchJobRequest, context):
        await tenancy.visible_job(of_call(), self.manager, request.name)
        async for event in self.manager.watch(request.name, request.after_sequence):
            yield js.WatchJobResponse(event=event)

    async def GetJobLogs(self, request: js.GetJobLogsRequest, context):
        await tenancy.visible_job(of_call(), self.manager, request.name)
        rank = request.rank if request.HasField("rank") else None
        async for lines in self.logs.stream(request.name, request.attempt, rank, request.tail_lines, request.follow):
            yield js.GetJobLogsResponse(lines=lines)
