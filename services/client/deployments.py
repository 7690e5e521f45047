"""What a deployment serves and how, as the SDK builds it for CreateDeployment and
UpdateDeployment: traffic targets from version numbers, and serving options that set only the
fields given (so an update changes those and leaves the rest as deployed)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from paddleray.exporter.v1 import deployment_pb2, model_pb2

BACKENDS = {
    "auto": model_pb2.BACKEND_UNSPECIFIED,
    "paddle": model_pb2.BACKEND_PADDLE_INFERENCE,
    "onnx": model_pb2.BACKEND_ONNX_RUNTIME,
}


def model_name(name_or_id: str) -> str:
    return name_or_id if name_or_id.startswith("models/") else f"models/{name_or_id}"


def deployment_name(name_or_id: str) -> str:
    return name_or_id if name_or_id.startswith("deployments/") else f"deployments/{name_or_id}"


def version_name(model: str, version: int | str) -> str:
    """"models/{id}/versions/{n}" of a model ("models/{id}" or "{id}") and a version number."""
    return f"{model_name(model)}/versions/{version}"


def version_number(name: str) -> str:
    """"3" of "models/x/versions/3" (the v2 model_version a client names)."""
    return name.rsplit("/", 1)[-1]


def traffic_targets(model: str, percents: Mapping[int, int]) -> list[deployment_pb2.TrafficTarget]:
    """One target per version number with its percent of the requests that name no version."""
    return [deployment_pb2.TrafficTarget(model_version=version_name(model, version), percent=percent)
            for version, percent in percents.items()]


@dataclass(frozen=True)
class ServingOptions:
    """Serving settings of a deployment; None leaves a setting as it is (the server's default
    on create). Autoscaling replaces a fixed replica count when max_replicas is set."""

    num_replicas: int | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    target_ongoing_requests: float | None = None
    num_cpus: float | None = None
    num_gpus: float | None = None
    max_batch_size: int | None = None
    batch_wait_s: float | None = None
    backend: str | None = None  # a key of BACKENDS
    cpu_threads: int | None = None
    enable_mkldnn: bool | None = None

    def apply(self, deployment: deployment_pb2.Deployment) -> list[str]:
        """Sets the given settings on deployment; returns the update_mask paths it changed."""
        paths: list[str] = []
        if self.num_replicas is not None:
            deployment.num_replicas = self.num_replicas
            deployment.ClearField("autoscaling")
            paths += ["num_replicas", "autoscaling"]
        if any(v is not None for v in (self.min_replicas, self.max_replicas, self.target_ongoing_requests)):
            scaling = deployment.autoscaling
            if self.min_replicas is not None:
                scaling.min_replicas = self.min_replicas
            if self.max_replicas is not None:
                scaling.max_replicas = self.max_replicas
            if self.target_ongoing_requests is not None:
                scaling.target_ongoing_requests = self.target_ongoing_requests
            paths.append("autoscaling")
        if self.num_cpus is not None or self.num_gpus is not None:
            if self.num_cpus is not None:
                deployment.resources_per_replica.num_cpus = self.num_cpus
            if self.num_gpus is not None:
                deployment.resources_per_replica.num_gpus = self.num_gpus
            paths.append("resources_per_replica")
        if self.max_batch_size is not None or self.batch_wait_s is not None:
            if self.max_batch_size is not None:
                deployment.batching.max_batch_size = self.max_batch_size
            if self.batch_wait_s is not None:
                deployment.batching.batch_wait_timeout.FromNanoseconds(round(self.batch_wait_s * 1e9))
            paths.append("batching")
        if self.backend is not None:
            deployment.backend = BACKENDS[self.backend]
            paths.append("backend")
        if self.cpu_threads is not None or self.enable_mkldnn is not None:
            if self.cpu_threads is not None:
                deployment.predictor.cpu_math_threads = self.cpu_threads
            if self.enable_mkldnn is not None:
                deployment.predictor.enable_mkldnn = self.enable_mkldnn
            paths.append("predictor")
        return list(dict.fromkeys(paths))


def new_deployment(model: str, percents: Mapping[int, int], options: ServingOptions | None = None,
                   serving_name: str = "") -> deployment_pb2.Deployment:
    """A Deployment to create: the versions of model with their traffic, and the options."""
    deployment = deployment_pb2.Deployment(serving_name=serving_name, traffic=traffic_targets(model, percents))
    (options or ServingOptions()).apply(deployment)
    return deployment
