"""Runs in: the exporter process.

ExporterService: translates protos to domain calls (exports, models, deployments) and back.
Each domain call gets the call's caller (identity.of_call(), set by the server's interceptor)
as its first argument: the domain decides nothing for a caller nobody named."""

from __future__ import annotations

from paddleray.exporter.v1 import exporter_service_pb2 as es
from paddleray.exporter.v1 import exporter_service_pb2_grpc
from paddleray.services.common.identity import of_call
from paddleray.services.exporter.deploy.deployments import DeploymentManager
from paddleray.services.exporter.export.exports import ExportManager
from paddleray.services.exporter.registry.models import ModelRegistry


class ExporterServicer(exporter_service_pb2_grpc.ExporterServiceServicer):
    def __init__(self, exports: ExportManager, models: ModelRegistry, deployments: DeploymentManager) -> None:
        self.exports = exports
        self.models = models
        self.deployments = deployments

    async def ExportModel(self, request: es.ExportModelRequest, context) -> es.ExportModelResponse:
        return es.ExportModelResponse(model_version=await self.exports.export(of_call(), request))

    async def WatchModelVersion(self, request: es.WatchModelVersionRequest, context):
        async for version in self.models.watch_version(of_call(), request.name):
            yield es.WatchModelVersionResponse(model_version=version)

    async def GetModel(self, request: es.GetModelRequest, context) -> es.GetModelResponse:
        return es.GetModelResponse(model=await self.models.get_model(of_call(), request.name))

    async def ListModels(self, request: es.ListModelsRequest, context) -> es.ListModelsResponse:
        models, token = await self.models.list_models(of_call(), request.page_size, request.page_token, request.tenant)
        return es.ListModelsResponse(models=models, next_page_token=token)

    async def UpdateModel(self, request: es.UpdateModelRequest, context) -> es.UpdateModelResponse:
        return es.UpdateModelResponse(model=await self.models.update_model(of_call(), request.model, request.update_mask))

    async def DeleteModel(self, request: es.DeleteModelRequest, context) -> es.DeleteModelResponse:
        await self.models.delete_model(of_call(), request.name)
        return es.DeleteModelResponse()

    async def GetModelVersion(self, request: es.GetModelVersionRequest, context) -> es.GetModelVersionResponse:
        return es.GetModelVersionResponse(model_version=await self.models.get_version(of_call(), request.name))

    async def ListModelVersions(self, request: es.ListModelVersionsRequest, context) -> es.ListModelVersionsResponse:
        versions, token = await self.models.list_versions(of_call(), request.parent, request.page_size, request.page_token)
        return es.ListModelVersionsResponse(model_versions=versions, next_page_token=token)

    async def DeleteModelVersion(self, request: es.DeleteModelVersionRequest, context) -> es.DeleteModelVersionResponse:
        await self.models.delete_version(of_call(), request.name)
        return es.DeleteModelVersionResponse()

    async def CreateDeployment(self, request: es.CreateDeploymentRequest, context) -> es.CreateDeploymentResponse:
        deployment = await self.deployments.create(of_call(), request.deployment_id, request.deployment, request.request_id)
        return es.CreateDeploymentResponse(deployment=deployment)

    async def GetDeployment(self, request: es.GetDeploymentRequest, context) -> es.GetDeploymentResponse:
        return es.GetDeploymentResponse(deployment=await self.deployments.get(of_call(), request.name))

    async def ListDeployments(self, request: es.ListDeploymentsRequest, context) -> es.ListDeploymentsResponse:
        deployments, token = await self.deployments.list_deployments(of_call(),
            request.page_size, request.page_token, request.model, request.model_version, request.tenant)
        return es.ListDeploymentsResponse(deployments=deployments, next_page_token=token)

    async def UpdateDeployment(self, request: es.UpdateDeploymentRequest, context) -> es.UpdateDeploymentResponse:
        deployment = await self.deployments.update(of_call(), request.deployment, request.update_mask)
        return es.UpdateDeploymentResponse(deployment=deployment)

    async def DeleteDeployment(self, request: es.DeleteDeploymentRequest, context) -> es.DeleteDeploymentResponse:
        return es.DeleteDeploymentResponse(deployment=await self.deployments.delete(of_call(), request.name))
