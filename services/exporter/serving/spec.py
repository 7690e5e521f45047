"""Runs in: the exporter process (it builds these), a Serve replica (its user_config) and the export Ray task (predictor options).

The desired state of served models: plain dataclasses the exporter builds from its protos.

`ServingController.apply(models)` takes the whole list (every served model, every version);
nothing here knows about protobuf, Ray or Redis, so the exporter translates its Deployment
resources into these and the serving layer translates these into Ray Serve applications.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from paddleray.services.common import names
from paddleray.services.common.errors import InvalidArgument

BACKENDS = ("paddle", "onnx")
# The one deployment of each served model's application (its ingress): the replica builds it
# under this name and the controller reads its status by it.
MODEL_DEPLOYMENT = "Model"


@dataclass(frozen=True)
class PredictorOptions:
    """How the Paddle Inference predictor is configured (ignored by the onnx backend except use_gpu).

    oneDNN is off by default: measured here, it is 2.5-3x slower at batch 1 than off, and only a
    CNN at batch 32 gained from it (2.6x). Turn it on for large-batch convolutional models.
    """

    enable_mkldnn: bool = False
    cpu_math_threads: int = 1
    use_gpu: bool = False
    enable_tensorrt: bool = False


@dataclass(frozen=True)
class Batching:
    """Dynamic batching of concurrent requests; max_batch_size counts rows, 1 turns it off."""

    max_batch_size: int = 1
    batch_wait_timeout_s: float = 0.0


@dataclass(frozen=True)
class Autoscaling:
    min_replicas: int = 1
    max_replicas: int = 1
    target_ongoing_requests: float = 2.0


@dataclass(frozen=True)
class ServedVersion:
    """One model version behind a serving name: `version` is the n of models/<id>/versions/<n>."""

    version: str
    artifact_dir: str
    weight: float = 1.0
    backend: str = "paddle"


@dataclass(frozen=True)
class ServedModel:
    """A serving name (v2 `model_name`), its versions with traffic weights, and its replicas.

    A v2 request naming `model_version` goes to that version (weight 0 included); one without
    goes to a version drawn at random in proportion to the weights. Every replica holds a
    predictor of each listed version and answers all of them itself (no hop between replicas):
    the replica settings below are the model's, shared by its versions.
    """

    serving_name: str
    versions: Sequence[ServedVersion]
    predictor: PredictorOptions = field(default_factory=PredictorOptions)
    batching: Batching = field(default_factory=Batching)
    num_replicas: int = 1
    # When set, num_replicas is ignored and Serve scales between min and max replicas.
    autoscaling: Autoscaling | None = None
    num_cpus: float = 1.0
    # A fraction below 1 also caps the replica's share of the card's memory.
    num_gpus: float = 0.0
    # Bytes of memory Ray reserves per replica; 0 reserves none.
    memory: int = 0
    # Requests one replica holds at once; above it Serve answers RESOURCE_EXHAUSTED, so it
    # must be at least the expected concurrency.
    max_ongoing_requests: int = 256


def validate_models(models: Sequence[ServedModel]) -> None:
    """Raises InvalidArgument naming the first field that breaks a rule."""
    served: set[str] = set()
    for i, model in enumerate(models):
        where = f"models[{i}]"
        if not names.is_serving_name(model.serving_name or ""):
            raise InvalidArgument(
                f"{where}.serving_name", "1-63 characters of a-z, 0-9, '.', '_', '-', starting with a letter or digit"
            )
        if model.serving_name in served:
            raise InvalidArgument(f"{where}.serving_name", f"'{model.serving_name}' is served twice")
        served.add(model.serving_name)
        _validate_replicas(where, model)
        if not model.versions:
            raise InvalidArgument(f"{where}.versions", "at least one version")
        seen: set[str] = set()
        for j, version in enumerate(model.versions):
            _validate_version(f"{where}.versions[{j}]", version)
            if version.version in seen:
                raise InvalidArgument(f"{where}.versions[{j}].version", f"version {version.version} is listed twice")
            seen.add(version.version)
        if sum(v.weight for v in model.versions) <= 0:
            raise InvalidArgument(f"{where}.versions", "the traffic weights must add up to more than 0")


def _validate_version(where: str, v: ServedVersion) -> None:
    if not names.is_version_number(v.version or ""):
        raise InvalidArgument(f"{where}.version", "the decimal n of models/<id>/versions/<n>")
    if not v.artifact_dir:
        raise InvalidArgument(f"{where}.artifact_dir", "required")
    if not math.isfinite(v.weight) or v.weight < 0:
        raise InvalidArgument(f"{where}.weight", "a finite number >= 0")
    if v.backend not in BACKENDS:
        raise InvalidArgument(f"{where}.backend", f"one of {', '.join(BACKENDS)}")


def _validate_replicas(where: str, v: ServedModel) -> None:
    if v.predictor.cpu_math_threads < 1:
        raise InvalidArgument(f"{where}.predictor.cpu_math_threads", ">= 1")
    if v.predictor.enable_tensorrt and not v.predictor.use_gpu:
        raise InvalidArgument(f"{where}.predictor.enable_tensorrt", "needs use_gpu")
    if v.predictor.use_gpu and v.num_gpus <= 0:
        raise InvalidArgument(f"{where}.num_gpus", "> 0 when predictor.use_gpu is set")
    if v.batching.max_batch_size < 1:
        raise InvalidArgument(f"{where}.batching.max_batch_size", ">= 1 (1 turns batching off)")
    if not math.isfinite(v.batching.batch_wait_timeout_s) or v.batching.batch_wait_timeout_s < 0:
        raise InvalidArgument(f"{where}.batching.batch_wait_timeout_s", "a finite number of seconds >= 0")
    if v.autoscaling is None:
        if v.num_replicas < 1:
            raise InvalidArgument(f"{where}.num_replicas", ">= 1")
    else:
        a = v.autoscaling
        if a.min_replicas < 0 or a.max_replicas < 1 or a.min_replicas > a.max_replicas:
            raise InvalidArgument(f"{where}.autoscaling", "0 <= min_replicas <= max_replicas, max_replicas >= 1")
        if not a.target_ongoing_requests > 0:
            raise InvalidArgument(f"{where}.autoscaling.target_ongoing_requests", "> 0")
    if not math.isfinite(v.num_cpus) or v.num_cpus < 0:
        raise InvalidArgument(f"{where}.num_cpus", ">= 0")
    if not math.isfinite(v.num_gpus) or v.num_gpus < 0:
        raise InvalidArgument(f"{where}.num_gpus", ">= 0")
    if v.num_gpus > 1 and v.num_gpus != int(v.num_gpus):
        raise InvalidArgument(f"{where}.num_gpus", "a fraction of one GPU or a whole number of GPUs")
    if v.memory < 0:
        raise InvalidArgument(f"{where}.memory", ">= 0 bytes")
    if v.max_ongoing_requests < 1:
        raise InvalidArgument(f"{where}.max_ongoing_requests", ">= 1")
