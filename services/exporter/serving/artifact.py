"""Runs in: a Serve replica, the export Ray task and the exporter process (the controller checks an artifact before it applies it).

The exported artifact the serving layer reads: a version directory and its manifest.

The directory's layout and manifest.json are common.model_manifest's (`Manifest`, the one
type that writes and reads it); here the manifest is checked against the files it names, and
the signature kept in the form the codec and the predictors use. A version on an object store
is read from this node's copy of it (common.model_cache: downloaded once, checked against the
manifest's digests; a version without its manifest is refused).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paddleray.services.common import model_cache
from paddleray.services.common.errors import FailedPrecondition
from paddleray.services.common.model_manifest import MANIFEST, PADDLE_DIR, Manifest, TensorSpec

__all__ = ["MANIFEST", "Artifact", "Signature", "TensorSpec", "load_artifact"]


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
    """Reads and checks a version directory (a path or an object-store URI); FailedPrecondition
    names what is wrong."""
    root = model_cache.local_version(directory)
    manifest = Manifest.load(root)
    paddle_dir = root / manifest.artifacts.get("paddle", PADDLE_DIR)
    program = next((p for p in (paddle_dir / "inference.json", paddle_dir / "inference.pdmodel") if p.is_file()), None)
    params = paddle_dir / "inference.pdiparams"
    if program is None or not params.is_file():
        raise FailedPrecondition(
            f"artifact {root}: {paddle_dir} needs inference.json (or inference.pdmodel) and inference.pdiparams"
        )
    onnx = None
    if manifest.artifacts.get("onnx"):
        onnx = root / manifest.artifacts["onnx"]
        if not onnx.is_file():
            raise FailedPrecondition(f"artifact {root}: the manifest lists {onnx}, which does not exist")
    return Artifact(
        root=root,
        model=manifest.model,
        version=manifest.version,
        signature=Signature(manifest.inputs, manifest.outputs),
        predictor_outputs=manifest.fetch_names,
        paddle_program=program,
        paddle_params=params,
        onnx_model=onnx,
    )
