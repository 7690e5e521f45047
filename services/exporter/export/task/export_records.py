"""Runs in: the exporter process and the export Ray task: what crosses between them.

What crosses the export task's boundary, as frozen dataclasses: the request the exporter
sends (ExportRequest) and the phases the task yields back (Exported, Validated, Failed).

Runs on both sides: built in the exporter process, pickled by Ray to the export task, and
the phases pickled back. Nothing across that boundary is read by string key: a renamed field
fails at the line that uses it, not as a KeyError in a task on the cluster (the trainer's
records, services/trainer/records.py, did the same for runs). The tensor signature is the
manifest's TensorSpec (common.model_manifest), the form the artifact stores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from paddleray.services.common.model_manifest import Manifest, TensorSpec
from paddleray.services.exporter.serving.spec import PredictorOptions

__all__ = ["BackendCheck", "ExportRequest", "Exported", "Failed", "Phase", "PredictorOptions", "Sample", "SampleCheck",
           "TensorSpec", "Validated", "ValidationOptions"]


@dataclass(frozen=True)
class Sample:
    """A sample input the request supplied: row-major little-endian bytes of the input's datatype."""

    name: str
    shape: tuple[int, ...]
    raw: bytes


@dataclass(frozen=True)
class ValidationOptions:
    num_samples: int = 4
    batch_size: int = 4
    atol: float = 1e-5
    rtol: float = 1e-5
    samples: tuple[Sample, ...] = ()  # given: the one sample batch, instead of generated ones
    dynamic_sizes: tuple[int, ...] = ()  # empty: validate.DEFAULT_DYNAMIC_SIZES
    # The predictor options the version is validated (and will be served) with.
    predictor: PredictorOptions = field(default_factory=PredictorOptions)


@dataclass(frozen=True)
class ExportRequest:
    builder: str  # "module:function"
    checkpoint_dir: str
    version_dir: str  # where the artifact goes (storage_paths.model_version_dir)
    model: str  # "models/<id>"
    version: str  # "models/<id>/versions/<n>"
    config: dict[str, Any] = field(default_factory=dict)
    inputs: tuple[TensorSpec, ...] = ()  # empty: the builder module's input_spec()
    formats: tuple[str, ...] = ("paddle",)
    validation: ValidationOptions = field(default_factory=ValidationOptions)
    tenant: str = ""
    builder_from_package: bool = False  # the builder may run only as a module of the package
    in_working_dir: bool = False  # the task starts in the package's unpacked working_dir


@dataclass(frozen=True)
class Exported:
    """The artifact is complete (its manifest written): the version shows VALIDATING."""

    manifest: Manifest
    version_dir: str
    sizes: dict[str, int]  # format -> bytes on disk


@dataclass(frozen=True)
class SampleCheck:
    inputs: tuple[TensorSpec, ...]  # the sample's concrete shapes
    passed: bool
    max_abs_error: float
    max_rel_error: float


@dataclass(frozen=True)
class BackendCheck:
    backend: str  # "paddle" or "onnx"
    passed: bool
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    median_latency_s: float = 0.0
    message: str = ""
    samples: tuple[SampleCheck, ...] = ()


@dataclass(frozen=True)
class Validated:
    """Every backend checked against the dynamic model on the same inputs."""

    passed: bool
    num_samples: int
    atol: float
    rtol: float
    backends: tuple[BackendCheck, ...]


@dataclass(frozen=True)
class Failed:
    """An export that ended at an error; `reason` becomes the version's state_reason."""

    reason: str
    traceback: str = ""


Phase = Exported | Validated | Failed
