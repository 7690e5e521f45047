"""Runs in: the exporter process.

The export task's results (export_records: Exported, Validated) into ModelVersion fields."""

from __future__ import annotations

from paddleray.exporter.v1 import model_pb2
from paddleray.services.exporter.export.task import datatypes
from paddleray.services.exporter.export.task.export_records import Exported, TensorSpec, Validated

S = model_pb2.ModelVersionState
BACKENDS = {"paddle": model_pb2.BACKEND_PADDLE_INFERENCE, "onnx": model_pb2.BACKEND_ONNX_RUNTIME}
FORMATS = {"paddle": model_pb2.EXPORT_FORMAT_PADDLE_INFERENCE, "onnx": model_pb2.EXPORT_FORMAT_ONNX}
BACKEND_FORMATS = {model_pb2.BACKEND_PADDLE_INFERENCE: model_pb2.EXPORT_FORMAT_PADDLE_INFERENCE,
                   model_pb2.BACKEND_ONNX_RUNTIME: model_pb2.EXPORT_FORMAT_ONNX}


def tensor_spec(spec: TensorSpec) -> model_pb2.TensorSpec:
    return model_pb2.TensorSpec(name=spec.name, shape=spec.shape, datatype=datatypes.to_enum(spec.datatype))


def apply_exported(version: model_pb2.ModelVersion, exported: Exported) -> None:
    """The artifact is complete: signature and artifacts recorded, validation next."""
    manifest = exported.manifest
    version.ClearField("inputs")
    version.inputs.extend(tensor_spec(t) for t in manifest.inputs)
    version.ClearField("outputs")
    version.outputs.extend(tensor_spec(t) for t in manifest.outputs)
    version.ClearField("metadata")
    if manifest.metadata:
        version.metadata.update(manifest.metadata)
    version.ClearField("artifacts")
    for kind, path in manifest.artifacts.items():
        version.artifacts.add(format=FORMATS[kind], uri=f"{exported.version_dir}/{path}",
                              size_bytes=int(exported.sizes[kind]))
    version.state = S.MODEL_VERSION_STATE_VALIDATING


def apply_validation(version: model_pb2.ModelVersion, validation: Validated) -> None:
    """READY when the Paddle Inference check passed (a failed ONNX check only makes that
    backend unservable); VALIDATION_FAILED with the figures otherwise."""
    result = model_pb2.ValidationResult(passed=validation.passed, num_samples=validation.num_samples,
                                        atol=validation.atol, rtol=validation.rtol)
    for check in validation.backends:
        entry = result.backends.add(backend=BACKENDS[check.backend], passed=check.passed,
                                    max_abs_error=check.max_abs_error, max_rel_error=check.max_rel_error,
                                    message=check.message)
        entry.median_latency.FromNanoseconds(int(check.median_latency_s * 1e9))
        for sample in check.samples:
            checked = entry.samples.add(passed=sample.passed, max_abs_error=sample.max_abs_error,
                                        max_rel_error=sample.max_rel_error)
            checked.inputs.extend(tensor_spec(t) for t in sample.inputs)
    version.validation.CopyFrom(result)
    failed = [b for b in result.backends if not b.passed]
    paddle_passed = any(b.passed for b in result.backends if b.backend == model_pb2.BACKEND_PADDLE_INFERENCE)
    version.state = S.MODEL_VERSION_STATE_READY if paddle_passed else S.MODEL_VERSION_STATE_VALIDATION_FAILED
    version.state_reason = "; ".join(
        f"{model_pb2.Backend.Name(b.backend)}: {b.message or 'failed'} (max abs {b.max_abs_error:.3g}, "
        f"max rel {b.max_rel_error:.3g})" for b in failed
    )


def validated_backends(version: model_pb2.ModelVersion) -> list[model_pb2.BackendValidation]:
    """Backends a version may be served with, fastest first."""
    passed = [b for b in version.validation.backends if b.passed]
    return sorted(passed, key=lambda b: b.median_latency.ToNanoseconds())
