"""Validation of an export: the dynamic model and each written backend on the same inputs.

Runs inside the export task (export_task.py). Outputs match when numpy.allclose(static,
dynamic, rtol, atol) holds: elementwise relative error blows up near zero outputs, so the
recorded relative figure is max|static - dynamic| / max|dynamic| per output, not elementwise.
Each backend is checked through the serving layer's own predictor (serving/predictor.py) with
the predictor options the version will be served with (oneDNN off unless asked), since that
predictor, not the TranslatedLayer, serves.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from paddleray.services.exporter import datatypes

_LATENCY_CALLS = 20
_SEED = 20261201


def sample_inputs(inputs: list[dict[str, Any]], options: dict[str, Any]) -> list[dict[str, Any]]:
    """Sample batches as {input name: array}: the supplied one, or num_samples generated ones."""
    import numpy as np

    if options.get("samples"):
        by_name = {t["name"]: t for t in inputs}
        batch = {}
        for sample in options["samples"]:
            dtype = datatypes.dtype_name(by_name[sample["name"]]["datatype"])
            batch[sample["name"]] = np.frombuffer(sample["raw"], dtype=dtype).reshape(sample["shape"])
        return [batch]
    rng = np.random.default_rng(_SEED)
    return [_generate(inputs, options["batch_size"], rng) for _ in range(options["num_samples"])]


def _generate(inputs: list[dict[str, Any]], size: int, rng) -> dict[str, Any]:
    import numpy as np

    batch = {}
    for spec in inputs:
        shape = [size if d == -1 else d for d in spec["shape"]]
        dtype = datatypes.dtype_name(spec["datatype"])
        if dtype.startswith("float"):
            batch[spec["name"]] = rng.standard_normal(shape).astype(dtype)
        elif dtype == "bool":
            batch[spec["name"]] = rng.integers(0, 2, shape).astype(bool)
        else:  # ids and counts: small non-negative values fit any embedding or index input
            batch[spec["name"]] = rng.integers(0, 2, shape).astype(dtype)
        batch[spec["name"]] = np.ascontiguousarray(batch[spec["name"]])
    return batch


def dynamic_outputs(model, inputs: list[dict[str, Any]], batch: dict[str, Any]) -> list[Any]:
    import paddle

    with paddle.no_grad():
        out = model(*[paddle.to_tensor(batch[t["name"]]) for t in inputs])
    flat: list[Any] = list(paddle.utils.flatten(out)) if isinstance(out, list | tuple | dict) else [out]
    return [t.numpy() for t in flat]


def output_signature(model, inputs: list[dict[str, Any]], paddle_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Output specs under the predictor's names: the predictor has no shape API, so the
    dynamic model runs at two batch sizes and the dimensions that follow the batch are -1."""
    import numpy as np

    rng = np.random.default_rng(_SEED)
    small = dynamic_outputs(model, inputs, _generate(inputs, 2, rng))
    large = dynamic_outputs(model, inputs, _generate(inputs, 3, rng))
    names = paddle_predictor(paddle_dir, {}).get_output_names()
    if len(names) != len(small):
        raise ValueError(f"the predictor has {len(names)} outputs, the dynamic model {len(small)}")
    outputs = [
        {"name": name, "datatype": datatypes.from_dtype(a.dtype),
         "shape": [-1 if x != y else int(x) for x, y in zip(a.shape, b.shape, strict=True)]}
        for name, a, b in zip(names, small, large, strict=True)
    ]
    return outputs, list(names)


def paddle_predictor(paddle_dir: Path, options: dict[str, Any]):
    import paddle.inference as pi

    program = paddle_dir / "inference.json"
    if not program.exists():
        program = paddle_dir / "inference.pdmodel"  # written by Paddle 2
    config = pi.Config(str(program), str(paddle_dir / "inference.pdiparams"))
    config.disable_glog_info()
    if not options.get("enable_mkldnn"):
        config.disable_mkldnn()
    config.set_cpu_math_library_num_threads(max(1, int(options.get("cpu_math_threads", 1))))
    return pi.create_predictor(config)


def _runner(version_dir: Path, backend: str, options: dict[str, Any]):
    """The serving layer's own predictor for this backend (same config, same output mapping)."""
    from paddleray.services.exporter.serving.artifact import load_artifact
    from paddleray.services.exporter.serving.predictor import load_predictor
    from paddleray.services.exporter.serving.spec import PredictorOptions

    artifact = load_artifact(version_dir)
    predictor = load_predictor(artifact, backend, PredictorOptions(
        enable_mkldnn=bool(options.get("enable_mkldnn")), cpu_math_threads=max(1, int(options.get("cpu_math_threads", 1))),
        use_gpu=bool(options.get("use_gpu")), enable_tensorrt=bool(options.get("enable_tensorrt"))))
    names = [t.name for t in artifact.signature.outputs]
    return lambda batch: [predictor.predict(batch)[n] for n in names]


def compare(model, samples: list[dict[str, Any]], exported: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    manifest = exported["manifest"]
    version_dir = Path(exported["version_dir"])
    inputs = manifest["inputs"]
    references = [dynamic_outputs(model, inputs, batch) for batch in samples]
    atol, rtol = options["atol"], options["rtol"]
    backends = []
    for backend in manifest["artifacts"]:
        backends.append(_check_backend(backend, version_dir, samples, references, atol, rtol,
                                       options.get("predictor", {})))
    return {"passed": all(b["passed"] for b in backends), "num_samples": len(samples), "atol": atol, "rtol": rtol,
            "backends": backends}


def _check_backend(backend: str, version_dir: Path, samples, references, atol: float, rtol: float,
                   predictor: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    result: dict[str, Any] = {"backend": backend, "passed": False, "max_abs_error": 0.0, "max_rel_error": 0.0,
              "median_latency_s": 0.0, "message": ""}
    try:
        runner = _runner(version_dir, backend, predictor)
    except Exception as exc:  # noqa: BLE001 - a backend that cannot load fails its check, says why
        result["message"] = f"{backend} predictor could not be created: {exc}"
        return result
    passed = True
    failures = []
    for index, (batch, reference) in enumerate(zip(samples, references, strict=True)):
        outputs = runner(batch)
        for position, (got, want) in enumerate(zip(outputs, reference, strict=True)):
            got, want = np.asarray(got), np.asarray(want)
            if got.shape != want.shape:
                passed = False
                failures.append(f"sample {index} output {position}: shape {list(got.shape)} != {list(want.shape)}")
                continue
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
            max_abs = float(diff.max()) if diff.size else 0.0
            scale = float(np.abs(want).max()) if want.size else 0.0
            result["max_abs_error"] = max(result["max_abs_error"], max_abs)
            result["max_rel_error"] = max(result["max_rel_error"], max_abs / scale if scale > 0 else max_abs)
            if not np.allclose(got, want, rtol=rtol, atol=atol):
                passed = False
                failures.append(f"sample {index} output {position}: max abs diff {max_abs:.3g}")
    result["passed"] = passed
    if failures:
        result["message"] = (f"{backend} differs from the dynamic model beyond atol={atol:g} + rtol={rtol:g}: "
                             + "; ".join(failures[:3]))
    result["median_latency_s"] = _median_latency(runner, samples[0])
    return result


def _median_latency(runner, batch: dict[str, Any]) -> float:
    runner(batch)  # warm-up: the first call allocates
    times = []
    for _ in range(_LATENCY_CALLS):
        started = time.perf_counter()
        runner(batch)
        times.append(time.perf_counter() - started)
    return statistics.median(times)
