"""The export itself, run on the cluster as a Ray task in the source job's runtime env.

`run_export(request)` is a generator task: it yields {"phase": "exported", ...} once the
artifact is complete (so that the version shows VALIDATING), then {"phase": "validated", ...}
with the figures of every backend, or {"phase": "failed", "reason": ...} at the first error
it can explain (a bad builder, a checkpoint that does not fit the model, a conversion error).

The version directory is written as checkpoints are (services/trainer/checkpoints.py): into a
temporary sibling, fsynced, renamed into place, and manifest.json written last through its own
rename; its presence means the artifact is complete. Layout::

    <storage_root>/models/<id>/versions/<n>/manifest.json
                                           paddle/inference.json + inference.pdiparams
                                           onnx/model.onnx            (when asked for)

Paddle, numpy and the model's code are imported here only, never in the exporter process.
"""

from __future__ import annotations

import importlib
import json
import shutil
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from paddleray.services.exporter import datatypes, validate
from paddleray.services.trainer.checkpoints import _fsync_dir, _fsync_tree, _write_atomically

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
PADDLE_DIR = "paddle"
ONNX_FILE = "onnx/model.onnx"
WEIGHTS_FILE = "model.pdparams"
# paddle2onnx's Python API defaults to opset 7; 13 converted and matched these models.
ONNX_OPSET = 13


class ExportError(Exception):
    """A failure the user can act on; its message becomes the version's state_reason."""


def run_export(request: dict[str, Any]) -> Iterator[dict[str, Any]]:
    try:
        import paddle

        with paddle.utils.unique_name.guard():
            model, module = _build(request)
            inputs = request["inputs"] or _default_inputs(module, request["builder"])
            exported = _write_artifacts(model, inputs, request)
            yield {"phase": "exported", **exported}
            samples = validate.sample_inputs(inputs, request["validation"])
            yield {"phase": "validated",
                   "validation": validate.compare(model, samples, exported, request["validation"])}
    except ExportError as exc:
        yield {"phase": "failed", "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - user code: anything may come out of it
        yield {"phase": "failed", "reason": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}


def _build(request: dict[str, Any]):
    import paddle

    module_name, _, function = request["builder"].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ExportError(f"model_builder: module {module_name!r} cannot be imported in the export task: {exc}") from exc
    builder = getattr(module, function, None)
    if not callable(builder):
        raise ExportError(f"model_builder: {module_name} has no function {function!r}")
    model = builder(request["config"])
    if not isinstance(model, paddle.nn.Layer):
        raise ExportError(f"model_builder: {request['builder']} returned {type(model).__name__}, not a paddle.nn.Layer")
    checkpoint = Path(request["checkpoint_dir"])
    loader = getattr(module, "load_weights", None)
    if callable(loader):  # a model whose checkpoint layout is its own
        loader(model, str(checkpoint))
    else:
        weights = checkpoint / WEIGHTS_FILE
        if not weights.is_file():
            raise ExportError(f"checkpoint {checkpoint} has no {WEIGHTS_FILE} (and {module_name} no load_weights)")
        missing, unexpected = model.set_state_dict(paddle.load(str(weights)))
        if missing or unexpected:
            raise ExportError(f"checkpoint {checkpoint} does not fit the model built by {request['builder']}: "
                              f"missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}")
    model.eval()
    return model, module


def _default_inputs(module, builder: str) -> list[dict[str, Any]]:
    spec_fn = getattr(module, "input_spec", None)
    if not callable(spec_fn):
        raise ExportError(f"inputs: not given, and {builder.partition(':')[0]} has no input_spec()")
    inputs = []
    for i, spec in enumerate(spec_fn()):
        name = spec.name or f"x{i}"
        shape = [-1 if d is None or d < 0 else int(d) for d in spec.shape]
        inputs.append({"name": name, "datatype": datatypes.from_dtype(spec.dtype), "shape": shape})
    return inputs


def input_specs(inputs: list[dict[str, Any]]):
    from paddle.static import InputSpec

    specs = []
    for t in inputs:
        dtype: Any = datatypes.dtype_name(t["datatype"])  # a dtype name Paddle accepts ("float32")
        specs.append(InputSpec([None if d == -1 else d for d in t["shape"]], dtype, t["name"]))
    return specs


def _write_artifacts(model, inputs: list[dict[str, Any]], request: dict[str, Any]) -> dict[str, Any]:
    import paddle

    final = Path(request["version_dir"])
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{uuid.uuid4().hex}"
    try:
        static = paddle.jit.to_static(model, input_spec=input_specs(inputs), full_graph=True)
        paddle.jit.save(static, str(tmp / PADDLE_DIR / "inference"))
        outputs, predictor_outputs = validate.output_signature(model, inputs, tmp / PADDLE_DIR)
        artifacts = {"paddle": PADDLE_DIR}
        if "onnx" in request["formats"]:
            write_onnx(tmp)
            artifacts["onnx"] = ONNX_FILE
        _fsync_tree(tmp)
        shutil.rmtree(final, ignore_errors=True)  # leftovers of an export cut short
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    manifest = {
        "format_version": FORMAT_VERSION, "model": request["model"], "version": request["version"],
        "inputs": inputs, "outputs": outputs, "artifacts": artifacts, "predictor_outputs": predictor_outputs,
    }
    _write_atomically(final / MANIFEST, json.dumps(manifest, indent=1))
    _fsync_dir(final.parent)
    sizes = {kind: _size(final / path) for kind, path in artifacts.items()}
    return {"manifest": manifest, "version_dir": str(final), "sizes": sizes}


def write_onnx(directory: Path) -> None:
    """directory/onnx/model.onnx from directory/paddle/inference.*: the conversion serving's ONNX artifacts get."""
    try:
        import paddle2onnx
    except ImportError as exc:
        raise ExportError("formats: ONNX asked for, but paddle2onnx is not installed in the export task's "
                          "environment (install the project's onnx extra)") from exc
    target = directory / ONNX_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    # optimize_tool="None": the default ("polygraphy") pip-installs packages at conversion time.
    paddle2onnx.export(str(directory / PADDLE_DIR / "inference.json"), str(directory / PADDLE_DIR / "inference.pdiparams"),
                       str(target), opset_version=ONNX_OPSET, auto_upgrade_opset=True, optimize_tool="None",
                       verbose=False)
    if not target.is_file():
        raise ExportError("paddle2onnx wrote no model")


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
