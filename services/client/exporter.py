"""The SDK's exporter calls: export a checkpoint as a model version and wait for it, the model
registry, deployments on Ray Serve (create, update traffic and replicas, delete, wait), and
where a served model's v2 endpoint is. Inference itself: inference.py."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import grpc
from google.protobuf import field_mask_pb2

from paddleray.common.v1 import common_pb2
from paddleray.exporter.v1 import (
    deployment_pb2,
    exporter_service_pb2,
    exporter_service_pb2_grpc,
    model_pb2,
)
from paddleray.services.client.deployments import ServingOptions, deployment_name, model_name, traffic_targets
from paddleray.services.client.errors import ConfigError, ServiceError, WaitTimeout
from paddleray.services.common import states, structs

V = model_pb2.ModelVersionState
D = deployment_pb2.DeploymentState
TERMINAL_VERSION_STATES = states.MODEL_VERSION_TERMINAL
SETTLED_DEPLOYMENT_STATES = frozenset({D.DEPLOYMENT_STATE_HEALTHY, D.DEPLOYMENT_STATE_UNHEALTHY})


def tensor_spec(text: str) -> model_pb2.TensorSpec:
    """An input of the static model from NAME:DTYPE:SHAPE, e.g. `x:FP32:-1,64` (-1: any size;
    DTYPE a v2 datatype: FP32, FP16, FP64, INT64, INT32, UINT8, BOOL, ...)."""
    parts = text.split(":")
    if len(parts) != 3 or not all(parts):
        raise ConfigError(f"input {text!r}: expected NAME:DTYPE:SHAPE, such as x:FP32:-1,64")
    name, datatype, shape = parts
    enum = f"DATA_TYPE_{datatype.upper()}"
    if enum not in model_pb2.DataType.keys() or enum == "DATA_TYPE_UNSPECIFIED":
        known = ", ".join(k.removeprefix("DATA_TYPE_") for k in model_pb2.DataType.keys()[1:])
        raise ConfigError(f"input {text!r}: datatype {datatype!r} is not one of {known}")
    try:
        dims = [int(d) for d in shape.split(",")]
    except ValueError:
        raise ConfigError(f"input {text!r}: shape {shape!r} must be comma-separated integers (-1 for any size)") from None
    return model_pb2.TensorSpec(name=name, datatype=enum, shape=dims)


def _prefixed(collection: str, name: str) -> str:
    return name if name.startswith(f"{collection}/") else f"{collection}/{name}"


class Exporter:
    """Models, versions and deployments (ExporterService), through a Client's settings."""

    def __init__(self, client) -> None:
        self._client = client
        self.address = client.settings.exporter
        self.stub = exporter_service_pb2_grpc.ExporterServiceStub(client.open(self.address))

    def _call(self, method, request):
        try:
            return self._client.call(method, request, address=self.address)
        except ServiceError as error:
            if error.code == grpc.StatusCode.UNIMPLEMENTED and "Method not found" in error.details:
                # A scheduler (or anything else) at the exporter's address: "Method not found!" says nothing.
                raise ServiceError(error.code, f"{self.address} is not an exporter (it does not serve "
                                   "paddleray.exporter.v1.ExporterService): give the exporter's address with "
                                   "--exporter-address or PADDLERAY_EXPORTER_ADDRESS") from None
            raise

    def export_model(self, model: str, job: str = "", checkpoint_uri: str = "",
                     formats: tuple[model_pb2.ExportFormat, ...] = (), model_builder: str = "",
                     model_config: Mapping[str, Any] | None = None, display_name: str = "",
                     labels: Mapping[str, str] | None = None, runtime_env: common_pb2.RuntimeEnv | None = None,
                     request_id: str | None = None, working_dir: str = "",
                     inputs: Sequence[model_pb2.TensorSpec] = (),
                     validation: model_pb2.ValidationOptions | None = None) -> model_pb2.ModelVersion:
        """Starts exporting a job's best checkpoint (or a checkpoint directory under the storage
        root, which needs model_builder) as a new version of model; returns it in EXPORTING.

        working_dir: where the builder's code is, as a job's: a package URI, or a local project
        directory, shipped first (Client.ship_directory); it replaces runtime_env's. Default: the
        job's runtime env. inputs: the static model's inputs, for a builder module without
        input_spec() (see tensor_spec). validation: how the static model is checked (samples,
        tolerances, the sizes of dynamic dimensions such as an image width: dynamic_sizes)."""
        request = exporter_service_pb2.ExportModelRequest(
            parent=model_name(model), formats=formats, model_builder=model_builder, display_name=display_name,
            labels=labels or {}, request_id=request_id or uuid.uuid4().hex, inputs=inputs,
        )
        if job:
            request.job = _prefixed("jobs", job)
        if checkpoint_uri:
            request.checkpoint_uri = checkpoint_uri
        if model_config is not None:
            request.model_config.CopyFrom(structs.to_struct(dict(model_config)))
        if runtime_env is not None:
            request.runtime_env.CopyFrom(runtime_env)
        if validation is not None:
            request.validation.CopyFrom(validation)
        if working_dir:
            uri = working_dir if "://" in working_dir else self._client.ship_directory(working_dir)
            request.runtime_env.working_dir = uri
        return self._call(self.stub.ExportModel, request).model_version

    def get_model_version(self, name: str) -> model_pb2.ModelVersion:
        request = exporter_service_pb2.GetModelVersionRequest(name=_prefixed("models", name))
        return self._call(self.stub.GetModelVersion, request).model_version

    def wait_model_version(self, name: str, timeout: float | None = None, poll_interval_s: float = 1.0,
                           on_update=None) -> model_pb2.ModelVersion:
        return _poll(lambda: self.get_model_version(name), lambda v: v.state in TERMINAL_VERSION_STATES,
                     lambda v: f"{v.name} is still {V.Name(v.state).removeprefix('MODEL_VERSION_STATE_')}",
                     timeout, poll_interval_s, on_update)

    def get_model(self, name: str) -> model_pb2.Model:
        return self._call(self.stub.GetModel, exporter_service_pb2.GetModelRequest(name=model_name(name))).model

    def list_models(self, limit: int | None = None) -> Iterator[model_pb2.Model]:
        yield from self._pages(
            lambda token: self._call(self.stub.ListModels, exporter_service_pb2.ListModelsRequest(page_token=token)),
            "models", limit)

    def list_model_versions(self, model: str, limit: int | None = None) -> Iterator[model_pb2.ModelVersion]:
        parent = model_name(model)
        yield from self._pages(lambda token: self._call(
            self.stub.ListModelVersions, exporter_service_pb2.ListModelVersionsRequest(parent=parent, page_token=token),
        ), "model_versions", limit)

    def delete_model(self, name: str) -> None:
        """Deletes a model with its versions; FAILED_PRECONDITION while one is served or exporting."""
        self._call(self.stub.DeleteModel, exporter_service_pb2.DeleteModelRequest(name=model_name(name)))

    def delete_model_version(self, name: str) -> None:
        request = exporter_service_pb2.DeleteModelVersionRequest(name=_prefixed("models", name))
        self._call(self.stub.DeleteModelVersion, request)

    def create_deployment(self, deployment_id: str, deployment: deployment_pb2.Deployment,
                          request_id: str | None = None) -> deployment_pb2.Deployment:
        request = exporter_service_pb2.CreateDeploymentRequest(
            deployment_id=deployment_id, deployment=deployment, request_id=request_id or uuid.uuid4().hex,
        )
        return self._call(self.stub.CreateDeployment, request).deployment

    def get_deployment(self, name: str) -> deployment_pb2.Deployment:
        request = exporter_service_pb2.GetDeploymentRequest(name=deployment_name(name))
        return self._call(self.stub.GetDeployment, request).deployment

    def wait_deployment(self, name: str, timeout: float | None = None, poll_interval_s: float = 1.0,
                        on_update=None, until_healthy: bool = False) -> deployment_pb2.Deployment:
        """Polls until the deployment is HEALTHY or UNHEALTHY; with until_healthy only HEALTHY
        ends the wait (an UNHEALTHY replica waiting for a free CPU recovers by itself), and
        WaitTimeout's message carries the last state and its reason."""
        settled = {D.DEPLOYMENT_STATE_HEALTHY} if until_healthy else SETTLED_DEPLOYMENT_STATES
        return _poll(lambda: self.get_deployment(name), lambda d: d.state in settled,
                     lambda d: f"{d.name} is still {D.Name(d.state).removeprefix('DEPLOYMENT_STATE_')}"
                               + (f" ({d.state_reason})" if d.state_reason else ""),
                     timeout, poll_interval_s, on_update)

    def list_deployments(self, model: str = "", model_version: str = "",
                         limit: int | None = None) -> Iterator[deployment_pb2.Deployment]:
        """Deployments newest first, optionally only those serving a model or one version of it."""
        request = exporter_service_pb2.ListDeploymentsRequest(
            model=model_name(model) if model else "", model_version=_prefixed("models", model_version) if model_version else "",
        )

        def page(token: str):
            request.page_token = token
            return self._call(self.stub.ListDeployments, request)

        yield from self._pages(page, "deployments", limit)

    def update_deployment(self, name: str, traffic: Mapping[int, int] | None = None,
                          options: ServingOptions | None = None) -> deployment_pb2.Deployment:
        """Changes the traffic split (version number -> percent) and the given options, and
        nothing else (the request's update_mask names only those); returns it in UPDATING."""
        current = self.get_deployment(name)
        wanted = deployment_pb2.Deployment()
        wanted.CopyFrom(current)
        paths = (options or ServingOptions()).apply(wanted)
        if traffic is not None:
            del wanted.traffic[:]
            wanted.traffic.extend(traffic_targets(current.model, traffic))
            paths.append("traffic")
        if not paths:
            raise ConfigError("nothing to change: give a traffic split or a serving option")
        request = exporter_service_pb2.UpdateDeploymentRequest(
            deployment=wanted, update_mask=field_mask_pb2.FieldMask(paths=paths))
        return self._call(self.stub.UpdateDeployment, request).deployment

    def delete_deployment(self, name: str) -> deployment_pb2.Deployment:
        """Stops serving it; returns it in DELETING (wait_deleted: until it is gone)."""
        request = exporter_service_pb2.DeleteDeploymentRequest(name=deployment_name(name))
        return self._call(self.stub.DeleteDeployment, request).deployment

    def wait_deleted(self, name: str, timeout: float | None = None, poll_interval_s: float = 1.0) -> None:
        """Polls until the deployment is gone (its replicas stopped)."""
        def gone() -> deployment_pb2.Deployment | None:
            try:
                return self.get_deployment(name)
            except ServiceError as error:
                if error.code == grpc.StatusCode.NOT_FOUND:
                    return None
                raise

        _poll(gone, lambda d: d is None, lambda d: f"{deployment_name(name)} is still being deleted",
              timeout, poll_interval_s, None)

    def serving_endpoint(self, serving_name: str) -> str:
        """The v2 gRPC endpoint of the deployment clients call as model_name serving_name."""
        for deployment in self.list_deployments():
            if deployment.serving_name == serving_name and deployment.endpoint:
                return deployment.endpoint
        raise ServiceError(grpc.StatusCode.NOT_FOUND, f"no deployment serves model_name {serving_name!r}")

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


def _poll(get, done, describe, timeout: float | None, interval: float, on_update):
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
            raise WaitTimeout(f"{describe(current)} after {timeout:g}s")
        time.sleep(interval)
