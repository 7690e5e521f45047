from __future__ import annotations

import json
import shutil

import pytest

from paddleray.services.common.errors import FailedPrecondition
from paddleray.services.exporter.serving.artifact import MANIFEST, load_artifact


def test_reads_the_exported_layout(mlp_artifact):
    directory, _ = mlp_artifact
    artifact = load_artifact(directory)
    assert artifact.model == "models/mlp" and artifact.version == "models/mlp/versions/1"
    assert [(t.name, t.datatype, t.shape) for t in artifact.signature.inputs] == [("x", "FP32", (-1, 64))]
    assert artifact.predictor_outputs == ("fetch_name_0",)
    assert artifact.paddle_program.name == "inference.json" and artifact.onnx_model is None
    assert artifact.has_backend("paddle") and not artifact.has_backend("onnx")


def test_accepts_a_paddle2_pdmodel_program(mlp_artifact, tmp_path):
    copy = tmp_path / "v1"
    shutil.copytree(mlp_artifact[0], copy)
    (copy / "paddle" / "inference.json").rename(copy / "paddle" / "inference.pdmodel")
    assert load_artifact(copy).paddle_program.name == "inference.pdmodel"


def test_no_manifest_means_incomplete(mlp_artifact, tmp_path):
    copy = tmp_path / "v1"
    shutil.copytree(mlp_artifact[0], copy)
    (copy / MANIFEST).unlink()
    with pytest.raises(FailedPrecondition, match="no manifest.json"):
        load_artifact(copy)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m.update(format_version=2), "format_version"),
        (lambda m: m["inputs"][0].update(datatype="FLOAT"), "datatype FLOAT"),
        (lambda m: m["inputs"][0].update(shape=[-2, 64]), "shape"),
        (lambda m: m.update(outputs=[]), "outputs is empty"),
        (lambda m: m.update(predictor_outputs=["a", "b"]), "predictor_outputs has 2 names for 1 outputs"),
        (lambda m: m["artifacts"].update(onnx="onnx/model.onnx"), "does not exist"),
        (lambda m: m.pop("inputs"), "malformed"),
    ],
)
def test_bad_manifests_are_rejected_with_the_reason(mlp_artifact, tmp_path, change, message):
    copy = tmp_path / "v1"
    shutil.copytree(mlp_artifact[0], copy)
    manifest = json.loads((copy / MANIFEST).read_text())
    change(manifest)
    (copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(FailedPrecondition, match=message):
        load_artifact(copy)


def test_missing_params_file(mlp_artifact, tmp_path):
    copy = tmp_path / "v1"
    shutil.copytree(mlp_artifact[0], copy)
    (copy / "paddle" / "inference.pdiparams").unlink()
    with pytest.raises(FailedPrecondition, match="inference.pdiparams"):
        load_artifact(copy)
