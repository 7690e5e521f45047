"""Version directories as the export task leaves them, for tests that need one without an export."""

from __future__ import annotations

from pathlib import Path

from paddleray.services.common.model_manifest import Manifest, TensorSpec


def write_exported(directory: Path, model_id: str, number: int | str, tenant: str = "") -> Manifest:
    """directory/manifest.json for a version of `model_id` (a 4 -> 2 FP32 signature), through the
    exporter's own Manifest.write; `tenant` "" is a manifest from before versions recorded one."""
    directory.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(
        model=f"models/{model_id}", version=f"models/{model_id}/versions/{number}",
        inputs=(TensorSpec("x", "FP32", (-1, 4)),), outputs=(TensorSpec("y", "FP32", (-1, 2)),), tenant=tenant)
    manifest.write(directory)
    return manifest
