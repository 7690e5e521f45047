"""The exported artifact the serving layer reads: a version directory with manifest.json.

Layout (written by the exporter, manifest last: its presence means the directory is complete):

    <dir>/manifest.json
    <dir>/paddle/inference.json + inference.pdiparams   (Paddle 3, PIR; inference.pdmodel from Paddle 2)
    <dir>/onnx/model.onnx                               (optional)

The manifest carries the signature (v2 names, datatypes, shapes with -1 for any size), since
the Paddle predictor has no shape API and names its outputs differently (fetch_name_0) from
paddle.jit.load (output_0): the serving layer trusts the manifest, not the predictor.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paddleray.services.common.errors import FailedPrecondition

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
# v2 datatype names the manifest may use.
DATATYPES = ("BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "FP16", "BF16", "FP32", "FP64")


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str
    shape: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TensorSpec:
        return cls(str(d["name"]), str(d["datatype"]), tuple(int(x) for x in d["shape"]))


@dataclass(frozen=True)
class Signature:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"inputs": [t.to_dict() for t in self.inputs], "outputs": [t.to_dict() for t in self.outputs]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Signature:
        return cls(
            tuple(TensorSpec.from_dict(t) for t in d["inputs"]), tuple(TensorSpec.from_dict(t) for t in d["outputs"])
        )


@dataclass(frozen=True)
class Artifact:
    root: Path
    model: str
    version: str
    signature: Signature
    # Paddle's fetch names, in the order of signature.outputs.
    predictor_outputs: tuple[str, ...]
    paddle_program: Path
    paddle_params: Path
    onnx_model: Path | None

    def has_backend(self, backend: str) -> bool:
        return backend == "paddle" or (backend == "onnx" and self.onnx_model is not None)


def load_artifact(directory: str | Path) -> Artifact:
    """Reads and checks a version directory; FailedPrecondition names what is wrong."""
    root = Path(directory)
    path = root / MANIFEST
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise FailedPrecondition(f"artifact {root}: no {MANIFEST} (the export is missing or incomplete)") from None
    except (OSError, ValueError) as exc:
        raise FailedPrecondition(f"artifact {root}: {MANIFEST} is unreadable: {exc}") from None
    if not isinstance(doc, dict):
        raise FailedPrecondition(f"artifact {root}: {MANIFEST} is not an object")
    try:
        return _parse(root, doc)
    except (KeyError, TypeError, ValueError) as exc:
        raise FailedPrecondition(f"artifact {root}: {MANIFEST} is malformed: {exc!r}") from None


def _parse(root: Path, doc: dict[str, Any]) -> Artifact:
    where = f"artifact {root}: {MANIFEST}"
    if doc.get("format_version") != FORMAT_VERSION:
        raise FailedPrecondition(f"{where}: format_version {doc.get('format_version')!r}, expected {FORMAT_VERSION}")
    inputs = tuple(_tensor(where, "inputs", t) for t in doc["inputs"])
    outputs = tuple(_tensor(where, "outputs", t) for t in doc["outputs"])
    for field, tensors in (("inputs", inputs), ("outputs", outputs)):
        if not tensors:
            raise FailedPrecondition(f"{where}: {field} is empty")
        names = [t.name for t in tensors]
        if len(set(names)) != len(names):
            raise FailedPrecondition(f"{where}: {field} has duplicate names {names}")
    fetch = tuple(str(n) for n in doc.get("predictor_outputs") or [t.name for t in outputs])
    if len(fetch) != len(outputs):
        raise FailedPrecondition(f"{where}: predictor_outputs has {len(fetch)} names for {len(outputs)} outputs")
    artifacts = doc.get("artifacts") or {}
    paddle_dir = root / str(artifacts.get("paddle", "paddle"))
    program = next((p for p in (paddle_dir / "inference.json", paddle_dir / "inference.pdmodel") if p.is_file()), None)
    params = paddle_dir / "inference.pdiparams"
    if program is None or not params.is_file():
        raise FailedPrecondition(
            f"artifact {root}: {paddle_dir} needs inference.json (or inference.pdmodel) and inference.pdiparams"
        )
    onnx = None
    if artifacts.get("onnx"):
        onnx = root / str(artifacts["onnx"])
        if not onnx.is_file():
            raise FailedPrecondition(f"artifact {root}: the manifest lists {onnx}, which does not exist")
    return Artifact(
        root=root,
        model=str(doc["model"]),
        version=str(doc["version"]),
        signature=Signature(inputs, outputs),
        predictor_outputs=fetch,
        paddle_program=program,
        paddle_params=params,
        onnx_model=onnx,
    )


def _tensor(where: str, field: str, d: dict[str, Any]) -> TensorSpec:
    spec = TensorSpec.from_dict(d)
    if not spec.name:
        raise FailedPrecondition(f"{where}: a tensor of {field} has no name")
    if spec.datatype not in DATATYPES:
        raise FailedPrecondition(f"{where}: {field} '{spec.name}' has datatype {spec.datatype}, not one of {DATATYPES}")
    if not spec.shape or any(dim < -1 for dim in spec.shape):
        raise FailedPrecondition(f"{where}: {field} '{spec.name}' has shape {list(spec.shape)} (dims >= -1, at least one)")
    return spec


def write_manifest(root: Path, manifest: dict[str, Any]) -> Path:
    """Writes manifest.json last and atomically (temp file + rename), as the exporter must."""
    path = root / MANIFEST
    tmp = root / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    return path
