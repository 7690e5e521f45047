"""The SDK's exporter and inference calls: export a job's checkpoint, wait for the version,
deploy it, wait for the deployment, and predict over the Open Inference Protocol v2."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import grpc
import numpy as np

from paddleray.exporter.v1 import (
    deployment_pb2,
    exporter_service_pb2,
    exporter_service_pb2_grpc,
    model_pb2,
)
from paddleray.inference.v2 import grpc_service_pb2, grpc_service_pb2_grpc
from paddleray.services.client.errors import ConfigError, ServiceError, WaitTimeout

V = model_pb2.ModelVersionState
D = deployment_pb2.DeploymentState
TERMINAL_VERSION_STATES = frozenset({
    V.MODEL_VERSION_STATE_READY, V.MODEL_VERSION_STATE_VALIDATION_FAILED, V.MODEL_VERSION_STATE_FAILED,
})
SETTLED_DEPLOYMENT_STATES = frozenset({D.DEPLOYMENT_STATE_HEALTHY, D.DEPLOYMENT_STATE_UNHEALTHY})
# v2 datatype names <-> numpy dtypes (the Open Inference Protocol's tensor data types).
_V2_DTYPES = {
    "BOOL": np.bool_, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
    "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
}


def _prefixed(collection: str, name: str) -> str:
    return name if name.startswith(f"{collection}/") else f"{collection}/{name}"


class Exporter:
    """Models, versions and deployments (ExporterService), through a Client's settings."""

    def __init__(self, client) -> None:
        self._client = client
        self.address = client.settings.exporter
        self.stub = exporter_service_pb2_grpc.ExporterServiceStub(client.open(self.address))

    def _call(self, method, request):
        return self._client.call(method, request, address=self.address)

    def export_model(self, model: str, job: str = "", checkpoint_uri: str = "", formats: tuple[model_pb2.ExportFormat, ...] = (),
                     request_id: str | None = None) -> model_pb2.ModelVersion:
        request = exporter_service_pb2.ExportModelRequest(
            parent=_prefixed("models", model), formats=formats, request_id=request_id or uuid.uuid4().hex,
        )
        if job:
            request.job = _prefixed("jobs", job)
        if checkpoint_uri:
            request.checkpoint_uri = checkpoint_uri
        return self._call(self.stub.ExportModel, request).model_version

    def get_model_version(self, name: str) -> model_pb2.ModelVersion:
        request = exporter_service_pb2.GetModelVersionRequest(name=_prefixed("models", name))
        return self._call(self.stub.GetModelVersion, request).model_version

    def wait_model_version(self, name: str, timeout: float | None = None, poll_interval_s: float = 1.0,
                           on_update=None) -> model_pb2.ModelVersion:
        return _poll(lambda: self.get_model_version(name), lambda v: v.state in TERMINAL_VERSION_STATES,
                     f"{name} is still exporting", timeout, poll_interval_s, on_update)

    def get_model(self, name: str) -> model_pb2.Model:
        return self._call(self.stub.GetModel, exporter_service_pb2.GetModelRequest(name=_prefixed("models", name))).model

    def list_models(self, limit: int | None = None) -> Iterator[model_pb2.Model]:
        yield from self._pages(
            lambda token: self._call(self.stub.ListModels, exporter_service_pb2.ListModelsRequest(page_token=token)),
            "models", limit)

    def list_model_versions(self, model: str, limit: int | None = None) -> Iterator[model_pb2.ModelVersion]:
        parent = _prefixed("models", model)
        yield from self._pages(lambda token: self._call(
            self.stub.ListModelVersions, exporter_service_pb2.ListModelVersionsRequest(parent=parent, page_token=token),
        ), "model_versions", limit)

    def create_deployment(self, deployment_id: str, deployment: deployment_pb2.Deployment,
                          request_id: str | None = None) -> deployment_pb2.Deployment:
        request = exporter_service_pb2.CreateDeploymentRequest(
            deployment_id=deployment_id, deployment=deployment, request_id=request_id or uuid.uuid4().hex,
        )
        return self._call(self.stub.CreateDeployment, request).deployment

    def get_deployment(self, name: str) -> deployment_pb2.Deployment:
        request = exporter_service_pb2.GetDeploymentRequest(name=_prefixed("deployments", name))
        return self._call(self.stub.GetDeployment, request).deployment

    def wait_deployment(self, name: str, timeout: float | None = None, poll_interval_s: float = 1.0,
                        on_update=None) -> deployment_pb2.Deployment:
        return _poll(lambda: self.get_deployment(name), lambda d: d.state in SETTLED_DEPLOYMENT_STATES,
                     f"{name} is still deploying", timeout, poll_interval_s, on_update)

    def list_deployments(self, model: str = "", limit: int | None = None) -> Iterator[deployment_pb2.Deployment]:
        model = _prefixed("models", model) if model else ""
        yield from self._pages(lambda token: self._call(
            self.stub.ListDeployments, exporter_service_pb2.ListDeploymentsRequest(model=model, page_token=token),
        ), "deployments", limit)

    def delete_deployment(self, name: str) -> deployment_pb2.Deployment:
        request = exporter_service_pb2.DeleteDeploymentRequest(name=_prefixed("deployments", name))
        return self._call(self.stub.DeleteDeployment, request).deployment

    @staticmethod
    def _pages(fetch, field: str, limit: int | None) -> Iterator:
        token, count = "", 0
        while True:
            response = fetch(token)
            for item in getattr(response, field):
                yield item
                count += 1
                if limit is not None and count >= limit:
                    return
            token = response.next_page_token
            if not token:
                return


class Inference:
    """The Open Inference Protocol v2 endpoint (inference.GRPCInferenceService)."""

    def __init__(self, client, address: str = "") -> None:
        self._client = client
        self.address = address or client.settings.inference_address
        if not self.address:
            raise ConfigError("no inference address: pass --inference-address or set PADDLERAY_INFERENCE_ADDRESS")
        self.stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(client.open(self.address))

    def server_live(self) -> bool:
        return self._client.call(self.stub.ServerLive, grpc_service_pb2.ServerLiveRequest(), address=self.address).live

    def server_ready(self) -> bool:
        return self._client.call(self.stub.ServerReady, grpc_service_pb2.ServerReadyRequest(), address=self.address).ready

    def infer(self, model: str, inputs: dict[str, np.ndarray], version: str = "") -> dict[str, np.ndarray]:
        """Runs the model on named arrays; returns its outputs by name."""
        request = grpc_service_pb2.ModelInferRequest(model_name=model, model_version=version)
        for name, array in inputs.items():
            array = np.ascontiguousarray(array)
            datatype = next((k for k, v in _V2_DTYPES.items() if np.dtype(v) == array.dtype), None)
            if datatype is None:
                raise ConfigError(f"input {name!r}: dtype {array.dtype} has no v2 datatype")
            request.inputs.add(name=name, datatype=datatype, shape=array.shape)
            request.raw_input_contents.append(array.tobytes())
        try:
            response = self.stub.ModelInfer(request, timeout=self._client.timeout)
        except grpc.RpcError as error:
            raise ServiceError(error.code(), error.details() or "") from None
        outputs = {}
        for index, output in enumerate(response.outputs):
            dtype = np.dtype(_V2_DTYPES[output.datatype])
            if index < len(response.raw_output_contents):
                data = np.frombuffer(response.raw_output_contents[index], dtype=dtype)
            else:
                contents = output.contents
                field = {"FP32": "fp32_contents", "FP64": "fp64_contents", "INT64": "int64_contents",
                         "INT32": "int_contents", "BOOL": "bool_contents"}.get(output.datatype, "fp32_contents")
                data = np.asarray(getattr(contents, field), dtype=dtype)
            outputs[output.name] = data.reshape(tuple(output.shape))
        return outputs


def _poll(get, done, message: str, timeout: float | None, interval: float, on_update):
    deadline = None if timeout is None else time.monotonic() + timeout
    last = None
    while True:
        current = get()
        if on_update is not None and current != last:
            on_update(current)
        last = current
        if done(current):
            return current
        if deadline is not None and time.monotonic() + interval > deadline:
            raise WaitTimeout(f"{message} after {timeout:g}s")
        time.sleep(interval)
