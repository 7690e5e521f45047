"""Runs in: the exporter process.

The rules of a Deployment's desired state; each error names the field it checks."""

from __future__ import annotations

import math

from paddleray.exporter.v1 import deployment_pb2, model_pb2
from paddleray.services.common import errors, names, training_spec
from paddleray.services.exporter.export.export_spec import predictor_options

MAX_TARGETS = 8
MAX_REPLICAS = 64
MAX_BATCH = 1024
MUTABLE_PATHS = ("traffic", "backend", "predictor", "num_replicas", "autoscaling", "resources_per_replica", "batching")


def check_serving_name(value: str, where: str = "deployment.serving_name") -> None:
    if not names.is_serving_name(value):
        raise errors.InvalidArgument(where, "must be 1-63 characters of [a-z0-9._-], starting with a letter or digit")


def targets(deployment: deployment_pb2.Deployment) -> list[tuple[str, int]]:
    """(model_id, version number) of every traffic target, in order; validates the traffic."""
    where = "deployment.traffic"
    if not 1 <= len(deployment.traffic) <= MAX_TARGETS:
        raise errors.InvalidArgument(where, f"must name 1-{MAX_TARGETS} model versions")
    found: list[tuple[str, int]] = []
    for i, target in enumerate(deployment.traffic):
        ids = names.MODEL_VERSION.parse(target.model_version, f"{where}[{i}].model_version")
        key = (ids["model"], int(ids["version"]))
        if found and key[0] != found[0][0]:
            raise errors.InvalidArgument(f"{where}[{i}].model_version",
                                         f"every target must be a version of the same model (models/{found[0][0]}): "
                                         "v2's model_version only names a version number")
        if key in found:
            raise errors.InvalidArgument(f"{where}[{i}].model_version", "is named twice")
        if not 0 <= target.percent <= 100:
            raise errors.InvalidArgument(f"{where}[{i}].percent", "must be in 0..100")
        found.append(key)
    if sum(t.percent for t in deployment.traffic) != 100:
        raise errors.InvalidArgument(where, "the percents must sum to 100")
    return found


def validate(deployment: deployment_pb2.Deployment) -> list[tuple[str, int]]:
    """Checks every desired-state field; returns the traffic targets."""
    found = targets(deployment)
    if deployment.backend not in model_pb2.Backend.values():
        raise errors.InvalidArgument("deployment.backend", "must be a Backend")
    predictor_options(deployment.predictor, "deployment.predictor")
    if deployment.predictor.enable_tensorrt and not deployment.predictor.use_gpu:
        raise errors.InvalidArgument("deployment.predictor.enable_tensorrt", "needs use_gpu")
    if not 0 <= deployment.num_replicas <= MAX_REPLICAS:
        raise errors.InvalidArgument("deployment.num_replicas", f"must be in 0..{MAX_REPLICAS} (0 means 1)")
    if deployment.HasField("autoscaling"):
        a = deployment.autoscaling
        if a.min_replicas < 0:
            raise errors.InvalidArgument("deployment.autoscaling.min_replicas", "must be >= 0")
        if not max(1, a.min_replicas) <= a.max_replicas <= MAX_REPLICAS:
            raise errors.InvalidArgument("deployment.autoscaling.max_replicas",
                                         f"must be in max(1, min_replicas)..{MAX_REPLICAS}")
        if not (math.isfinite(a.target_ongoing_requests) and a.target_ongoing_requests > 0):
            raise errors.InvalidArgument("deployment.autoscaling.target_ongoing_requests", "must be > 0")
    _resources(deployment)
    batching = deployment.batching
    if not 0 <= batching.max_batch_size <= MAX_BATCH:
        raise errors.InvalidArgument("deployment.batching.max_batch_size", f"must be in 0..{MAX_BATCH} (0 or 1: off)")
    wait_s = batching.batch_wait_timeout.ToNanoseconds() / 1e9
    if not 0 <= wait_s <= 1:
        raise errors.InvalidArgument("deployment.batching.batch_wait_timeout", "must be between 0 and 1s")
    if deployment.predictor.use_gpu and deployment.resources_per_replica.num_gpus <= 0:
        raise errors.InvalidArgument("deployment.resources_per_replica.num_gpus", "must be > 0 when predictor.use_gpu is set")
    return found


def _resources(deployment: deployment_pb2.Deployment) -> None:
    where = "deployment.resources_per_replica"
    res = deployment.resources_per_replica
    for name in ("num_cpus", "num_gpus"):
        value = getattr(res, name)
        if not math.isfinite(value) or value < 0:
            raise errors.InvalidArgument(f"{where}.{name}", "must be a finite number >= 0")
    training_spec.check_cpus(res, where)
    if res.num_gpus > 1 and not res.num_gpus.is_integer():
        raise errors.InvalidArgument(f"{where}.num_gpus", "a fraction of one GPU, or whole GPUs")
    if res.memory_bytes < 0:
        raise errors.InvalidArgument(f"{where}.memory_bytes", "must be >= 0")
    if res.custom:
        raise errors.InvalidArgument(f"{where}.custom", "custom resources are not supported for serving replicas")


def merge(current: deployment_pb2.Deployment, change: deployment_pb2.Deployment, paths: list[str]) -> deployment_pb2.Deployment:
    """current with the masked fields of change (an empty mask: every mutable field)."""
    paths = paths or list(MUTABLE_PATHS)
    merged = deployment_pb2.Deployment()
    merged.CopyFrom(current)
    for path in paths:
        if path == "serving_name":
            raise errors.InvalidArgument("update_mask", "serving_name cannot be changed: create another deployment")
        if path not in MUTABLE_PATHS:
            raise errors.InvalidArgument("update_mask", f"path {path!r} cannot be changed (only {', '.join(MUTABLE_PATHS)})")
        merged.ClearField(path)
        if path in ("traffic",):
            merged.traffic.extend(change.traffic)
        elif path in ("backend", "num_replicas"):
            setattr(merged, path, getattr(change, path))
        elif change.HasField(path):
            getattr(merged, path).CopyFrom(getattr(change, path))
    return merged
