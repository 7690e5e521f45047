"""ExperimentService: translates requests to ExperimentManager calls and results back.

Each method reads the call's caller once (identity.of_call()) and passes it; the tenant rules
are the domain's (ExperimentManager, scheduler/tenancy.py).
"""

from __future__ import annotations

from paddleray.scheduler.v1 import experiment_service_pb2 as pb
from paddleray.scheduler.v1 import experiment_service_pb2_grpc
from paddleray.services.common.identity import of_call
from paddleray.services.common.server import ServiceRegistration
from paddleray.services.scheduler.experiments import ExperimentManager


class ExperimentServicer(experiment_service_pb2_grpc.ExperimentServiceServicer):
    def __init__(self, experiments: ExperimentManager) -> None:
        self._experiments = experiments

    async def CreateExperiment(self, request: pb.CreateExperimentRequest, context) -> pb.CreateExperimentResponse:
        given = request.experiment if request.HasField("experiment") else None
        experiment = await self._experiments.create(given, request.experiment_id, request.request_id, caller=of_call())
        return pb.CreateExperimentResponse(experiment=experiment)

    async def GetExperiment(self, request: pb.GetExperimentRequest, context) -> pb.GetExperimentResponse:
        return pb.GetExperimentResponse(experiment=await self._experiments.get(request.name, caller=of_call()))

    async def ListExperiments(self, request: pb.ListExperimentsRequest, context) -> pb.ListExperimentsResponse:
        experiments, token = await self._experiments.list(request.page_size, request.page_token, request.states,
                                                          caller=of_call())
        return pb.ListExperimentsResponse(experiments=experiments, next_page_token=token)

    async def CancelExperiment(self, request: pb.CancelExperimentRequest, context) -> pb.CancelExperimentResponse:
        experiment = await self._experiments.cancel(request.name, request.reason, caller=of_call())
        return pb.CancelExperimentResponse(experiment=experiment)

    async def DeleteExperiment(self, request: pb.DeleteExperimentRequest, context) -> pb.DeleteExperimentResponse:
        await self._experiments.delete(request.name, caller=of_call())
        return pb.DeleteExperimentResponse()


def registration(experiments: ExperimentManager) -> ServiceRegistration:
    return ServiceRegistration(
        pb.DESCRIPTOR.services_by_name["ExperimentService"].full_name,
        ExperimentServicer(experiments),
        experiment_service_pb2_grpc.add_ExperimentServiceServicer_to_server,
    )
