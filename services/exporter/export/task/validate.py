"""Runs in: the export Ray task.

Validation of an export: the dynamic model and each written backend on the same inputs.

Runs inside the export task (export_task.py). Outputs match when numpy.allclose(static,
dynamic, rtol, atol) holds: elementwise relative error blows up near zero outputs, so the
recorded relative figure is max|static - dynamic| / max|dynamic| per output, not elementwise.
Each backend is checked through the serving layer's own predictor (serving/replica/predictor.py) with
the predictor options the version will be served with (oneDNN off unless asked), since that
predictor, not the TranslatedLayer, serves.

Generated samples: a dynamic (-1) first dimension is the batch (`batch_size` rows); every other
dynamic dimension (a sequence length, an image width) takes `dynamic_sizes[i % len]` in sample
i, so a model with a free width is checked at several widths, and each sample's figures are
recorded with its shapes. A model whose output length follows such a dimension (a recognizer's
time steps) gets a -1 there in its output signature: the dynamic model is probed at the
smallest and the largest of those sizes.
"""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path
from typing import Any

from paddleray.services.exporter.export.task import datatypes
from paddleray.services.exporter.export.task.export_records import (
    BackendCheck,
    Exported,
    PredictorOptions,
    SampleCheck,
    TensorSpec,
    Validated,
    ValidationOptions,
)

_LATENCY_CALLS = 20
_SEED = 20261201
# Sizes of the dynamic dimensions after the first when the request gives none: common
# sequence lengths, and image widths from a few characters to a line.
DEFAULT_DYNAMIC_SIZES = (16, 32, 64, 128)
# All generated samples together (the dynamic model's outputs for each come on top).
MAX_SAMPLE_BYTES = 256 * 2**20


def sample_inputs(inputs: tuple[TensorSpec, ...], options: ValidationOptions) -> list[dict[str, Any]]:
    """Sample batches as {input name: array}: the supplied one, or num_samples generated ones."""
    import numpy as np

    if options.samples:
        by_name = {t.name: t for t in inputs}
        batch = {}
        for sample in options.samples:
            dtype = datatypes.dtype_name(by_name[sample.name].datatype)
            batch[sample.name] = np.frombuffer(sample.raw, dtype=dtype).reshape(sample.shape)
        return [batch]
    sizes = dynamic_sizes(options)
    extents = [sizes[i % len(sizes)] for i in range(options.num_samples)]
    _check_sample_bytes(inputs, options.batch_size, extents)
    rng = np.random.default_rng(_SEED)
    return [_generate(inputs, options.batch_size, extent, rng) for extent in extents]


def _check_sample_bytes(inputs: tuple[TensorSpec, ...], rows: int, extents: list[int]) -> None:
    """Refuses samples too large to hold: a width of 4096 in 64 batches of 1024 rows is in range
    field by field and would take tens of GiB in the export task."""
    import numpy as np

    total, largest = 0, ("", [0], 0)
    for extent in extents:
        for spec in inputs:
            shape = _shape(spec, rows, extent)
            size = math.prod(shape) * np.dtype(datatypes.dtype_name(spec.datatype)).itemsize
            total += size
            largest = max(largest, (spec.name, shape, size), key=lambda item: item[2])
    if total > MAX_SAMPLE_BYTES:
        name, shape, _ = largest
        raise ValueError(
            f"validation: the generated samples would take {total / 2**20:,.0f} MiB (input {name} {shape}), more than "
            f"{MAX_SAMPLE_BYTES // 2**20} MiB: lower validation.batch_size, num_samples or dynamic_sizes")


def _shape(spec: TensorSpec, rows: int, extent: int) -> list[int]:
    return [(rows if axis == 0 else extent) if d == -1 else d for axis, d in enumerate(spec.shape)]


def dynamic_sizes(options: ValidationOptions) -> tuple[int, ...]:
    return options.dynamic_sizes or DEFAULT_DYNAMIC_SIZES


def _generate(inputs: tuple[TensorSpec, ...], rows: int, extent: int, rng) -> dict[str, Any]:
    """Random inputs: `rows` in a dynamic first dimension, `extent` in every other dynamic one."""
    import numpy as np

    batch = {}
    for spec in inputs:
        shape = _shape(spec, rows, extent)
        dtype = datatypes.dtype_name(spec.datatype)
        if dtype.startswith("float"):
            batch[spec.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == "bool":
            batch[spec.name] = rng.integers(0, 2, shape).astype(bool)
        else:  # ids and counts: small non-negative values fit any embedding or index input
            batch[spec.name] = rng.integers(0, 2, shape).astype(dtype)
        batch[spec.name] = np.ascontiguousarray(batch[spec.name])
    return batch


def dynamic_outputs(model, inputs: tuple[TensorSpec, ...], batch: dict[str, Any]) -> list[Any]:
    import paddle

    with paddle.no_grad():
        out = model(*[paddle.to_tensor(batch[t.name]) for t in inputs])
    flat: list[Any] = list(paddle.utils.flatten(out)) if isinstance(out, list | tuple | dict) else [out]
    return [t.numpy() for t in flat]


def output_signature(model, inputs: tuple[TensorSpec, ...], paddle_dir: Path,
                     sizes: tuple[int, ...] = DEFAULT_DYNAMIC_SIZES) -> tuple[tuple[TensorSpec, ...], tuple[str, ...]]:
    """Output specs under the predictor's names: the predictor has no shape API, so the
    dynamic model runs twice, at 2 then 3 rows and the smallest then the largest of the other
    dynamic sizes, and the output dimensions that change are -1."""
    import numpy as np

    rng = np.random.default_rng(_SEED)
    small = dynamic_outputs(model, inputs, _generate(inputs, 2, min(sizes), rng))
    large = dynamic_outputs(model, inputs, _generate(inputs, 3, max(sizes), rng))
    names = paddle_predictor(paddle_dir, PredictorOptions()).get_output_names()
    if len(names) != len(small):
        raise ValueError(f"the predictor has {len(names)} outputs, the dynamic model {len(small)}")
    outputs = tuple(
        TensorSpec(name, datatypes.from_dtype(a.dtype),
                   tuple(-1 if x != y else int(x) for x, y in zip(a.shape, b.shape, strict=True)))
        for name, a, b in zip(names, small, large, strict=True)
    )
    return outputs, tuple(names)


def paddle_predictor(paddle_dir: Path, options: PredictorOptions):
    import paddle.inference as pi

    program = paddle_dir / "inference.json"
    if not program.exists():
        program = paddle_dir / "inference.pdmodel"  # written by Paddle 2
    config = pi.Config(str(program), str(paddle_dir / "inference.pdiparams"))
    config.disable_glog_info()
    if not options.enable_mkldnn:
        config.disable_mkldnn()
    config.set_cpu_math_library_num_threads(max(1, options.cpu_math_threads))
    return pi.create_predictor(config)


def _runner(version_dir: Path, backend: str, options: PredictorOptions):
    """The serving layer's own predictor for this backend (same config, same output mapping)."""
    from paddleray.services.exporter.serving.artifact import load_artifact
    from paddleray.services.exporter.serving.replica.predictor import load_predictor

    artifact = load_artifact(version_dir)
    predictor = load_predictor(artifact, backend, options)
    names = [t.name for t in artifact.signature.outputs]
    return lambda batch: [predictor.predict(batch)[n] for n in names]


def compare(model, samples: list[dict[str, Any]], exported: Exported, options: ValidationOptions,
            directory: Path | None = None) -> Validated:
    """directory: a local copy of the version (the staged upload of one on an object store)."""
    manifest = exported.manifest
    version_dir = directory or Path(exported.version_dir)
    references = [dynamic_outputs(model, manifest.inputs, batch) for batch in samples]
    backends = tuple(_check_backend(backend, version_dir, samples, references, options.atol, options.rtol,
                                    options.predictor) for backend in manifest.artifacts)
    return Validated(passed=all(b.passed for b in backends), num_samples=len(samples), atol=options.atol,
                     rtol=options.rtol, backends=backends)


def _check_backend(backend: str, version_dir: Path, samples, references, atol: float, rtol: float,
                   predictor: PredictorOptions) -> BackendCheck:
    try:
        runner = _runner(version_dir, backend, predictor)
    except Exception as exc:  # noqa: BLE001 - a backend that cannot load fails its check, says why
        return BackendCheck(backend, passed=False, message=f"{backend} predictor could not be created: {exc}")
    failures: list[str] = []
    checks = tuple(_check_sample(index, runner(batch), batch, reference, atol, rtol, failures)
                   for index, (batch, reference) in enumerate(zip(samples, references, strict=True)))
    message = ""
    if failures:
        message = (f"{backend} differs from the dynamic model beyond atol={atol:g} + rtol={rtol:g}: "
                   + "; ".join(failures[:3]))
    return BackendCheck(backend, passed=all(c.passed for c in checks),
                        max_abs_error=max((c.max_abs_error for c in checks), default=0.0),
                        max_rel_error=max((c.max_rel_error for c in checks), default=0.0),
                        median_latency_s=_median_latency(runner, samples[0]), message=message, samples=checks)


def _check_sample(index: int, outputs, batch: dict[str, Any], reference, atol: float, rtol: float,
                  failures: list[str]) -> SampleCheck:
    """One sample's outputs against the dynamic model's; a mismatch is appended to `failures`."""
    import numpy as np

    passed, worst_abs, worst_rel = True, 0.0, 0.0
    for position, (got, want) in enumerate(zip(outputs, reference, strict=True)):
        got, want = np.asarray(got), np.asarray(want)
        if got.shape != want.shape:
            passed = False
            failures.append(f"sample {index} output {position}: shape {list(got.shape)} != {list(want.shape)}")
            continue
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        max_abs = float(diff.max()) if diff.size else 0.0
        scale = float(np.abs(want).max()) if want.size else 0.0
        worst_abs = max(worst_abs, max_abs)
        worst_rel = max(worst_rel, max_abs / scale if scale > 0 else max_abs)
        if not np.allclose(got, want, rtol=rtol, atol=atol):
            passed = False
            failures.append(f"sample {index} output {position}: max abs diff {max_abs:.3g}")
    inputs = tuple(TensorSpec(name, datatypes.from_dtype(np.asarray(array).dtype), tuple(np.shape(array)))
                   for name, array in batch.items())
    return SampleCheck(inputs=inputs, passed=passed, max_abs_error=worst_abs, max_rel_error=worst_rel)


def _median_latency(runner, batch: dict[str, Any]) -> float:
    runner(batch)  # warm-up: the first call allocates
    times = []
    for _ in range(_LATENCY_CALLS):
        started = time.perf_counter()
        runner(batch)
        times.append(time.perf_counter() - started)
    return statistics.median(times)
