"""manifest.json of an exported model version: the one type that writes and reads it.

Written by the export task (services/exporter/export/task/export_task.py) last, once the version
directory is complete, so its presence means the directory is whole; read by the Serve
replicas and the validation (services/exporter/serving/artifact.py), by the trainer and the
scheduler for an init_from's tenant (common.storage_paths.version_tenant), and written by the
tests and benchmarks that make artifacts without an export. Layout of the directory::

    <dir>/manifest.json
    <dir>/paddle/inference.json + inference.pdiparams   (Paddle 3, PIR; inference.pdmodel from Paddle 2)
    <dir>/onnx/model.onnx                               (optional)

The manifest carries the signature (v2 names, datatypes, shapes with -1 for any size), since
the Paddle predictor has no shape API and names its outputs differently (fetch_name_0) from
paddle.jit.load (output_0): the serving layer trusts the manifest, not the predictor.
`write` refuses a manifest `load` would refuse, so what an export writes is servable.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from paddleray.services.common import files, v2_datatypes
from paddleray.services.common.errors import FailedPrecondition
from paddleray.services.common.storage import Storage, is_uri

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
PADDLE_DIR = "paddle"
ONNX_FILE = "onnx/model.onnx"


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str  # a v2 name ("FP32")
    shape: tuple[int, ...]  # -1: any size

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TensorSpec:
        return cls(str(d["name"]), str(d["datatype"]), tuple(int(x) for x in d["shape"]))


@dataclass(frozen=True)
class Manifest:
    model: str  # "models/<id>"
    version: str  # "models/<id>/versions/<n>"
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    # Export format ("paddle", "onnx") -> its path relative to the version directory.
    artifacts: dict[str, str] = field(default_factory=lambda: {"paddle": PADDLE_DIR})
    # Paddle's fetch names, in the order of outputs (empty: the outputs' own names).
    predictor_outputs: tuple[str, ...] = ()
    # Whose version this is, for readers of the storage root that have no registry; a manifest
    # written before versions recorded their tenant has none (the default tenant's).
    tenant: str = ""
    # What the builder's export_metadata(config) said a client needs (a charset, label names).
    metadata: dict[str, Any] = field(default_factory=dict)
    # Every artifact file (a path relative to the version directory) -> its SHA-256 (hex): what
    # a copy downloaded from an object store is checked against (common.model_cache). Empty in
    # a manifest written before exports recorded them (nothing to check then but presence).
    files: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.predictor_outputs:  # as read back: the outputs' own names
            object.__setattr__(self, "predictor_outputs", tuple(t.name for t in self.outputs))

    @property
    def fetch_names(self) -> tuple[str, ...]:
        return self.predictor_outputs

    def check(self) -> None:
        """ValueError naming the first field that a reader would refuse."""
        for name, tensors in (("inputs", self.inputs), ("outputs", self.outputs)):
            if not tensors:
                raise ValueError(f"{name} is empty")
            names = [t.name for t in tensors]
            if len(set(names)) != len(names):
                raise ValueError(f"{name} has duplicate names {names}")
            for t in tensors:
                if not t.name:
                    raise ValueError(f"a tensor of {name} has no name")
                if t.datatype not in v2_datatypes.SERVABLE:
                    raise ValueError(f"{name} '{t.name}' has datatype {t.datatype}, not one of the servable "
                                     f"{v2_datatypes.SERVABLE}")
                if not t.shape or any(dim < -1 for dim in t.shape):
                    raise ValueError(f"{name} '{t.name}' has shape {list(t.shape)} (dims >= -1, at least one)")
        if len(self.fetch_names) != len(self.outputs):
            raise ValueError(f"predictor_outputs has {len(self.fetch_names)} names for {len(self.outputs)} outputs")
        for path in self.files:
            parts = PurePosixPath(path).parts
            if not parts or path.startswith("/") or ".." in parts or path == MANIFEST:
                raise ValueError(f"files names {path!r}, not a file inside the version directory")

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "format_version": FORMAT_VERSION, "model": self.model, "version": self.version,
            "inputs": [t.to_dict() for t in self.inputs], "outputs": [t.to_dict() for t in self.outputs],
            "artifacts": dict(self.artifacts), "predictor_outputs": list(self.fetch_names), "tenant": self.tenant,
        }
        if self.metadata:
            doc["metadata"] = dict(self.metadata)
        if self.files:
            doc["files"] = dict(sorted(self.files.items()))
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> Manifest:
        """The manifest a parsed manifest.json holds; ValueError (or KeyError, TypeError) when malformed."""
        if not isinstance(doc, dict):
            raise ValueError("is not an object")
        if doc.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"format_version {doc.get('format_version')!r}, expected {FORMAT_VERSION}")
        metadata = doc.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise ValueError(f"metadata is {type(metadata).__name__}, not an object")
        digests = doc.get("files") or {}
        if not isinstance(digests, dict) or not all(isinstance(v, str) for v in digests.values()):
            raise ValueError("files is not an object of path -> SHA-256")
        manifest = cls(
            model=str(doc["model"]), version=str(doc["version"]),
            inputs=tuple(TensorSpec.from_dict(t) for t in doc["inputs"]),
            outputs=tuple(TensorSpec.from_dict(t) for t in doc["outputs"]),
            artifacts={str(k): str(v) for k, v in (doc.get("artifacts") or {"paddle": PADDLE_DIR}).items()},
            predictor_outputs=tuple(str(n) for n in doc.get("predictor_outputs") or ()),
            tenant=str(doc.get("tenant") or ""), metadata=metadata,
            files={str(k): v for k, v in digests.items()},
        )
        manifest.check()
        return manifest

    def write(self, directory: str | Path) -> str | Path:
        """manifest.json into `directory` (a path, or an object-store URI: common.storage),
        atomically and fsynced (common.files; one PUT on an object store): write it last, once
        every file it names is durable. ValueError for a manifest `load` would refuse."""
        self.check()
        text = json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n"
        if isinstance(directory, str) and is_uri(directory):
            storage = Storage.for_root(directory)
            storage.write_atomically(MANIFEST, text.encode())
            return storage.location(MANIFEST)
        path = Path(directory) / MANIFEST
        files.write_atomically(path, text)
        return path

    @classmethod
    def load(cls, directory: str | Path) -> Manifest:
        """The manifest of a version directory; FailedPrecondition says what is missing or wrong."""
        root = directory if isinstance(directory, str) and is_uri(directory) else Path(directory)
        try:
            text = Storage.for_root(root).read_text(MANIFEST) if isinstance(root, str) else (root / MANIFEST).read_text()
            doc = json.loads(text)
        except FileNotFoundError:
            raise FailedPrecondition(f"artifact {root}: no {MANIFEST} (the export is missing or incomplete)") from None
        except (OSError, ValueError) as exc:
            raise FailedPrecondition(f"artifact {root}: {MANIFEST} is unreadable: {exc}") from None
        try:
            return cls.from_json(doc)
        except (KeyError, TypeError, ValueError) as exc:
            detail = str(exc) if type(exc) is ValueError else repr(exc)
            raise FailedPrecondition(f"artifact {root}: {MANIFEST} is malformed: {detail}") from None


def file_digests(directory: Path) -> dict[str, str]:
    """Every file under a local version directory but the manifest -> its SHA-256 (hex)."""
    return {p.relative_to(directory).as_posix(): sha256_of(p) for p in sorted(directory.rglob("*"))
            if p.is_file() and p.relative_to(directory).as_posix() != MANIFEST}


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def exists(directory: str | Path) -> bool:
    """Whether the version directory (a path or an object-store URI) is complete: its
    manifest is written last."""
    if isinstance(directory, str) and is_uri(directory):
        return Storage.for_root(directory).exists(MANIFEST)
    return (Path(directory) / MANIFEST).is_file()
