"""Runs in: the export Ray task, in the source job's runtime env.

The export itself, run on the cluster as a Ray task in the source job's runtime env.

`run_export(request)` is a generator task over export_records' types: it yields Exported once
the artifact is complete (so that the version shows VALIDATING), then Validated with the
figures of every backend, or Failed at the first error it can explain (a bad builder, a
checkpoint that does not fit the model, a conversion error).

The version directory is written as checkpoints are (common.files): into a temporary sibling,
fsynced, renamed into place, and manifest.json (common.model_manifest.Manifest) written last
through its own rename; its presence means the artifact is complete. Layout::

    <storage_root>/models/<id>/versions/<n>/manifest.json
                                           paddle/inference.json + inference.pdiparams
                                           onnx/model.onnx            (when asked for)

On an object-store root (version_dir an s3:// URI, common.storage) the same rule holds with
the store's means: the files are staged in this node's cache, uploaded under the version's
prefix, and manifest.json (one PUT, atomic) last; validation runs on the staged copy (the bytes
uploaded), which is removed after. The manifest records every file's SHA-256, which a Serve
replica checks its downloaded copy against (common.model_cache). The checkpoint, on the store
too, is read from the node's copy of it (common.storage.local_copy).

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

from paddleray.services.common import files
from paddleray.services.common.call_state import fresh_call
from paddleray.services.common.model_manifest import MANIFEST, ONNX_FILE, PADDLE_DIR, Manifest, TensorSpec, file_digests
from paddleray.services.common.storage import Storage, cache_dir, is_uri, local_copy
from paddleray.services.exporter.export.task import datatypes, validate
from paddleray.services.exporter.export.task.export_records import Exported, ExportRequest, Failed, Phase

__all__ = ["MANIFEST", "ExportError", "run_export", "write_onnx"]
WEIGHTS_FILE = "model.pdparams"
# paddle2onnx's Python API defaults to opset 7; 13 converted and matched these models.
ONNX_OPSET = 13
# A model version is read often (GetModelVersion, every list): its metadata stays small.
MAX_METADATA_BYTES = 64 * 1024


class ExportError(Exception):
    """A failure the user can act on; its message becomes the version's state_reason."""


def run_export(request: ExportRequest) -> Iterator[Phase]:
    try:
        import paddle

        # Ray starts a task with a working_dir in that directory (the unpacked package). The task
        # may run in a process an earlier export used: each starts as in a fresh one.
        working_dir = Path.cwd().resolve() if request.in_working_dir else None
        with fresh_call(paddle, working_dir):
            model, module = _build(request, working_dir)
            inputs = request.inputs or _default_inputs(module, request.builder)
            exported, local = _write_artifacts(model, inputs, request, _metadata(module, request))
            try:
                yield exported
                samples = validate.sample_inputs(inputs, request.validation)
                yield validate.compare(model, samples, exported, request.validation, local)
            finally:
                if local != Path(exported.version_dir):  # the staged copy of an upload
                    shutil.rmtree(local, ignore_errors=True)
    except ExportError as exc:
        yield Failed(str(exc))
    except Exception as exc:  # noqa: BLE001 - user code: anything may come out of it
        yield Failed(f"{type(exc).__name__}: {exc}", traceback.format_exc())


def _build(request: ExportRequest, working_dir: Path | None):
    import paddle

    module_name, _, function = request.builder.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ExportError(f"model_builder: module {module_name!r} cannot be imported in the export task: {exc}") from exc
    if request.builder_from_package:
        _check_from_package(module, working_dir)
    builder = getattr(module, function, None)
    if not callable(builder):
        raise ExportError(f"model_builder: {module_name} has no function {function!r}")
    model = builder(request.config)
    if not isinstance(model, paddle.nn.Layer):
        raise ExportError(f"model_builder: {request.builder} returned {type(model).__name__}, not a paddle.nn.Layer")
    checkpoint = local_copy(request.checkpoint_dir)
    loader = getattr(module, "load_weights", None)
    if callable(loader):  # a model whose checkpoint layout is its own
        loader(model, str(checkpoint))
    else:
        weights = checkpoint / WEIGHTS_FILE
        if not weights.is_file():
            raise ExportError(f"checkpoint {checkpoint} has no {WEIGHTS_FILE} (and {module_name} no load_weights)")
        missing, unexpected = model.set_state_dict(paddle.load(str(weights)))
        if missing or unexpected:
            raise ExportError(f"checkpoint {checkpoint} does not fit the model built by {request.builder}: "
                              f"missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}")
    model.eval()
    return model, module


def _check_from_package(module, working_dir: Path | None) -> None:
    """A builder allowed as package code must come from the package: a name the zip also has
    must not hand out an installed module (the rule of the trainer's workers)."""
    origin = getattr(module, "__file__", None)
    path = Path(origin).resolve() if origin else None
    if working_dir is None or path is None or not path.is_relative_to(working_dir):
        raise ExportError(f"model_builder: module {module.__name__!r} was loaded from {origin or 'no file'}, not from "
                          f"the export's package ({working_dir}); only modules of the package or the allowlist may run")


def _default_inputs(module, builder: str) -> tuple[TensorSpec, ...]:
    spec_fn = getattr(module, "input_spec", None)
    if not callable(spec_fn):
        raise ExportError(f"inputs: not given, and {builder.partition(':')[0]} has no input_spec()")
    inputs = []
    for i, spec in enumerate(spec_fn()):
        name = spec.name or f"x{i}"
        shape = [-1 if d is None or d < 0 else int(d) for d in spec.shape]
        inputs.append(TensorSpec(name, datatypes.from_dtype(spec.dtype), tuple(shape)))
    return tuple(inputs)


def _metadata(module, request: ExportRequest) -> dict[str, Any]:
    """What the builder module's `export_metadata(config)` says a client needs to read the
    outputs (an OCR model's charset, a classifier's label names), else nothing."""
    hook = getattr(module, "export_metadata", None)
    if not callable(hook):
        return {}
    metadata = hook(request.config)
    if not isinstance(metadata, dict) or not all(isinstance(k, str) for k in metadata):
        raise ExportError(f"export_metadata: {module.__name__}.export_metadata returned {type(metadata).__name__}, "
                          "not a dict with string keys")
    try:
        encoded = json.dumps(metadata, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ExportError(f"export_metadata: {module.__name__}.export_metadata returned a value that is not "
                          f"plain JSON: {exc}") from exc
    if len(encoded.encode()) > MAX_METADATA_BYTES:
        raise ExportError(f"export_metadata: {module.__name__}.export_metadata returned {len(encoded.encode()):,} "
                          f"bytes of JSON, more than {MAX_METADATA_BYTES:,}")
    return metadata


def input_specs(inputs: tuple[TensorSpec, ...]):
    from paddle.static import InputSpec

    specs = []
    for t in inputs:
        dtype: Any = datatypes.dtype_name(t.datatype)  # a dtype name Paddle accepts ("float32")
        specs.append(InputSpec([None if d == -1 else d for d in t.shape], dtype, t.name))
    return specs


def _write_artifacts(model, inputs: tuple[TensorSpec, ...], request: ExportRequest,
                     metadata: dict[str, Any]) -> tuple[Exported, Path]:
    """The complete version at request.version_dir, and a local directory with its files."""
    remote = is_uri(request.version_dir)
    parent = cache_dir("exports") if remote else Path(request.version_dir).parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = parent / f".tmp-{uuid.uuid4().hex}"
    try:
        manifest = _stage(model, inputs, request, metadata, tmp)
        if remote:
            _publish_remote(tmp, request.version_dir, manifest)
            local = tmp
        else:
            local = _publish_local(tmp, Path(request.version_dir), manifest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    sizes = {kind: _size(local / path) for kind, path in manifest.artifacts.items()}
    return Exported(manifest=manifest, version_dir=str(request.version_dir), sizes=sizes), local


def _stage(model, inputs: tuple[TensorSpec, ...], request: ExportRequest, metadata: dict[str, Any],
           tmp: Path) -> Manifest:
    """The version's files in tmp, and the manifest that completes them (not written yet)."""
    import paddle

    static = paddle.jit.to_static(model, input_spec=input_specs(inputs), full_graph=True)
    paddle.jit.save(static, str(tmp / PADDLE_DIR / "inference"))
    outputs, predictor_outputs = validate.output_signature(model, inputs, tmp / PADDLE_DIR,
                                                           validate.dynamic_sizes(request.validation))
    artifacts = {"paddle": PADDLE_DIR}
    if "onnx" in request.formats:
        write_onnx(tmp)
        artifacts["onnx"] = ONNX_FILE
    return Manifest(model=request.model, version=request.version, inputs=inputs, outputs=outputs,
                    artifacts=artifacts, predictor_outputs=predictor_outputs, tenant=request.tenant,
                    metadata=metadata, files=file_digests(tmp))


def _publish_local(tmp: Path, final: Path, manifest: Manifest) -> Path:
    files.fsync_tree(tmp)
    shutil.rmtree(final, ignore_errors=True)  # leftovers of an export cut short
    tmp.rename(final)
    manifest.write(final)
    files.fsync_dir(final.parent)
    return final


def _publish_remote(tmp: Path, uri: str, manifest: Manifest) -> None:
    storage = Storage.for_root(uri)
    storage.delete("")  # leftovers of an export cut short (never a complete version: see exports.py)
    storage.upload_dir(tmp, "")
    manifest.write(uri)
    manifest.write(tmp)  # the staged copy, validated next, is a complete version too


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
