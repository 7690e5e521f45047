"""Runs in: the exporter process.

What an ExportModel request asks for, validated once: an ExportSpec or a clear error.

Every rule names the field it checks (INVALID_ARGUMENT). A model_builder may run under the rule
of training entrypoints (paddleray.services.common.entrypoints): a module under an allowlisted
prefix, or a module file of the export's own package (its runtime_env.working_dir, given or the
source job's); anything else is PERMISSION_DENIED, once the package is known (ExportManager).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paddleray.common.v1 import common_pb2
from paddleray.exporter.v1 import exporter_service_pb2 as es
from paddleray.exporter.v1 import model_pb2
from paddleray.services.common import entrypoints, errors, idempotency, names, storage_paths, structs, training_spec
from paddleray.services.common.labels import validate_labels
from paddleray.services.exporter.export.task import datatypes
from paddleray.services.exporter.export.task.export_records import (
    PredictorOptions,
    Sample,
    TensorSpec,
    ValidationOptions,
)

_TENSOR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,127}")
_FORMATS: dict[int, str] = {model_pb2.EXPORT_FORMAT_PADDLE_INFERENCE: "paddle", model_pb2.EXPORT_FORMAT_ONNX: "onnx"}
_ENV_VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_DISPLAY_NAME = 256
DEFAULT_TOLERANCE = 1e-5
MAX_DYNAMIC_SIZES = 16
MAX_DYNAMIC_SIZE = 4096


@dataclass(frozen=True)
class ExportSpec:
    model_id: str
    job: str = ""  # "jobs/{id}" when the source is a job
    checkpoint_dir: str = ""  # when the source is a checkpoint_uri
    builder: str = ""  # empty: the job's entrypoint module's build_model
    config: dict[str, Any] | None = None  # None: the job's config
    inputs: tuple[TensorSpec, ...] = ()  # empty: the builder module's input_spec()
    formats: tuple[str, ...] = ("paddle",)
    validation: ValidationOptions = field(default_factory=ValidationOptions)
    runtime_env: dict[str, Any] | None = None  # None: the job's
    request_id: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    display_name: str = ""


def check_builder(builder: str, allowlist: Sequence[str], package_files: Sequence[str] | None = None,
                  where: str = "model_builder") -> bool:
    """Raises unless the builder may run; True when it may only as a module of the package
    (the export task then checks that the module it imported came from the package)."""
    return entrypoints.check_entrypoint(builder, allowlist, package_files, field=where)


def export_spec(request: es.ExportModelRequest, storage_root: str | Path) -> ExportSpec:
    model_id = names.MODEL.parse_one(request.parent, field="parent")
    source = request.WhichOneof("source")
    if source is None:
        raise errors.InvalidArgument("source", "set job ('jobs/{id}') or checkpoint_uri")
    job = checkpoint_dir = ""
    if source == "job":
        names.JOB.parse(request.job, field="job")
        job = request.job
    else:
        checkpoint_dir = _checkpoint_dir(request.checkpoint_uri, storage_root)
        if not request.model_builder:
            raise errors.InvalidArgument("model_builder", "is required when exporting a checkpoint_uri (no job to take it from)")
    if request.model_builder:
        entrypoints.check_form(request.model_builder, "model_builder")
    # The builder gets it as a training job's config: the same rules (size, depth, finite numbers).
    training_spec.validate_config(request.model_config, "model_config")
    idempotency.check_request_id(request.request_id)
    if len(request.display_name) > MAX_DISPLAY_NAME:
        raise errors.InvalidArgument("display_name", f"must be at most {MAX_DISPLAY_NAME} characters")
    validate_labels(request.labels, "labels")
    inputs = tuple(_tensor_spec(t, f"inputs[{i}]") for i, t in enumerate(request.inputs))
    if len({t.name for t in inputs}) != len(inputs):
        raise errors.InvalidArgument("inputs", "names must be unique")
    return ExportSpec(
        model_id=model_id,
        job=job,
        checkpoint_dir=checkpoint_dir,
        builder=request.model_builder,
        config=structs.to_python(request.model_config) if request.HasField("model_config") else None,
        inputs=inputs,
        formats=_formats(request.formats),
        validation=validation_options(request.validation, inputs),
        runtime_env=runtime_env(request.runtime_env, "runtime_env") if request.HasField("runtime_env") else None,
        request_id=request.request_id,
        labels=dict(request.labels),
        display_name=request.display_name,
    )


def _checkpoint_dir(uri: str, storage_root: str | Path) -> str:
    from paddleray.services.common.checkpoints import read_checkpoint

    path = storage_paths.confined(uri, storage_root, "checkpoint_uri")
    if read_checkpoint(path) is None:
        raise errors.NotFound(f"checkpoint_uri: {uri} is not a complete checkpoint (no manifest)")
    return str(path)


def _tensor_spec(spec: model_pb2.TensorSpec, where: str) -> TensorSpec:
    if not _TENSOR_NAME.fullmatch(spec.name):
        raise errors.InvalidArgument(f"{where}.name", "must be 1-128 characters of [A-Za-z0-9_.:-], not starting with a digit")
    if not spec.shape:
        raise errors.InvalidArgument(f"{where}.shape", "must have at least one dimension")
    if any(d == 0 or d < -1 for d in spec.shape):
        raise errors.InvalidArgument(f"{where}.shape", "dimensions must be positive, or -1 for any size")
    try:
        datatype = datatypes.from_enum(spec.datatype)
    except KeyError:
        raise errors.InvalidArgument(f"{where}.datatype", "must be set to a DataType") from None
    if datatype == "BF16":
        raise errors.InvalidArgument(f"{where}.datatype", "BF16 inputs cannot be validated on CPU; export as FP32")
    return TensorSpec(spec.name, datatype, tuple(int(d) for d in spec.shape))


def _formats(values: Sequence[int]) -> tuple[str, ...]:
    formats = ["paddle"]  # the predictor of record: validation and ONNX conversion start from it
    for i, value in enumerate(values):
        if value not in _FORMATS:
            raise errors.InvalidArgument(f"formats[{i}]", "must be EXPORT_FORMAT_PADDLE_INFERENCE or EXPORT_FORMAT_ONNX")
        if _FORMATS[value] not in formats:
            formats.append(_FORMATS[value])
    return tuple(formats)


def predictor_options(config: model_pb2.PredictorConfig, where: str) -> PredictorOptions:
    if not 0 <= config.cpu_math_threads <= 64:
        raise errors.InvalidArgument(f"{where}.cpu_math_threads", "must be in 0..64 (0 means 1)")
    return PredictorOptions(enable_mkldnn=config.enable_mkldnn, cpu_math_threads=config.cpu_math_threads or 1,
                           use_gpu=config.use_gpu, enable_tensorrt=config.enable_tensorrt)


def validation_options(options: model_pb2.ValidationOptions, inputs: tuple[TensorSpec, ...]) -> ValidationOptions:
    where = "validation"
    if not 0 <= options.num_samples <= 64:
        raise errors.InvalidArgument(f"{where}.num_samples", "must be in 0..64 (0 means 4)")
    if not 0 <= options.batch_size <= 1024:
        raise errors.InvalidArgument(f"{where}.batch_size", "must be in 0..1024 (0 means 4)")
    for name in ("atol", "rtol"):
        value = getattr(options, name)
        if not math.isfinite(value) or value < 0:
            raise errors.InvalidArgument(f"{where}.{name}", "must be a finite number >= 0 (0 means 1e-5)")
    if len(options.dynamic_sizes) > MAX_DYNAMIC_SIZES:
        raise errors.InvalidArgument(f"{where}.dynamic_sizes", f"must list at most {MAX_DYNAMIC_SIZES} sizes")
    for i, size in enumerate(options.dynamic_sizes):
        if not 1 <= size <= MAX_DYNAMIC_SIZE:
            raise errors.InvalidArgument(f"{where}.dynamic_sizes[{i}]", f"must be in 1..{MAX_DYNAMIC_SIZE}")
    samples = tuple(_sample(s, inputs, f"{where}.sample_inputs[{i}]") for i, s in enumerate(options.sample_inputs))
    if samples and inputs and {s.name for s in samples} != {t.name for t in inputs}:
        raise errors.InvalidArgument(f"{where}.sample_inputs", "must give exactly one tensor for each input")
    return ValidationOptions(
        num_samples=1 if samples else options.num_samples or 4,
        batch_size=options.batch_size or 4,
        atol=options.atol or DEFAULT_TOLERANCE,
        rtol=options.rtol or DEFAULT_TOLERANCE,
        samples=samples,
        dynamic_sizes=tuple(int(size) for size in options.dynamic_sizes),
        predictor=predictor_options(options.predictor, f"{where}.predictor"),
    )


def _sample(value: model_pb2.TensorValue, inputs: tuple[TensorSpec, ...], where: str) -> Sample:
    shape = [int(d) for d in value.shape]
    if not shape or any(d <= 0 for d in shape):
        raise errors.InvalidArgument(f"{where}.shape", "must be concrete: positive dimensions")
    spec = next((t for t in inputs if t.name == value.name), None)
    if inputs and spec is None:
        raise errors.InvalidArgument(f"{where}.name", f"{value.name!r} is none of the inputs")
    if spec is not None:
        if len(shape) != len(spec.shape) or any(d not in (-1, s) for d, s in zip(spec.shape, shape, strict=True)):
            raise errors.InvalidArgument(f"{where}.shape", f"{shape} does not fit the input's shape {list(spec.shape)}")
        import numpy as np

        expected = math.prod(shape) * np.dtype(datatypes.dtype_name(spec.datatype)).itemsize
        if len(value.raw_contents) != expected:
            raise errors.InvalidArgument(f"{where}.raw_contents", f"must hold {expected} bytes ({spec.datatype} x {shape})")
    return Sample(value.name, tuple(shape), bytes(value.raw_contents))


def runtime_env(env: common_pb2.RuntimeEnv, where: str) -> dict[str, Any]:
    """As Ray's runtime_env (image_uri for the container image)."""
    if env.image and env.working_dir:
        raise errors.InvalidArgument(f"{where}.working_dir", "cannot be combined with image (Ray's image_uri takes only env_vars)")
    for key in env.env_vars:
        if not _ENV_VAR.fullmatch(key):
            raise errors.InvalidArgument(f"{where}.env_vars[{key!r}]", "names must match [A-Za-z_][A-Za-z0-9_]*")
    result: dict[str, Any] = {}
    if env.env_vars:
        result["env_vars"] = dict(env.env_vars)
    if env.working_dir:
        result["working_dir"] = env.working_dir
    if env.image:
        result["image_uri"] = env.image
    return result
