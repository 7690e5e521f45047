"""manifest.json has one type: what Manifest.write writes, Manifest.load (and serving) reads back,
and a manifest load would refuse is never written."""

from __future__ import annotations

import json
import os

import pytest

from paddleray.services.common import model_manifest, storage_paths
from paddleray.services.common.errors import FailedPrecondition
from paddleray.services.common.model_manifest import MANIFEST, Manifest, TensorSpec


def _manifest(**fields) -> Manifest:
    values = {"model": "models/m", "version": "models/m/versions/1", "inputs": (TensorSpec("x", "FP32", (-1, 4)),),
              "outputs": (TensorSpec("y", "INT64", (-1,)),), "predictor_outputs": ("fetch_name_0",),
              "tenant": "team-a", "metadata": {"labels": ["a", "b"]}}
    return Manifest(**{**values, **fields})


def test_write_then_load_gives_the_same_manifest(tmp_path):
    manifest = _manifest(artifacts={"paddle": "paddle", "onnx": "onnx/model.onnx"})
    path = manifest.write(tmp_path)
    assert path == tmp_path / MANIFEST and Manifest.load(tmp_path) == manifest
    assert model_manifest.exists(tmp_path) and storage_paths.version_tenant(tmp_path) == "team-a"
    # Nothing but the manifest is left behind: the temporary file was renamed over it.
    assert os.listdir(tmp_path) == [MANIFEST]


def test_write_replaces_a_manifest_whole(tmp_path):
    _manifest(tenant="team-a").write(tmp_path)
    _manifest(tenant="team-b").write(tmp_path)
    assert Manifest.load(tmp_path).tenant == "team-b" and os.listdir(tmp_path) == [MANIFEST]


@pytest.mark.parametrize(("fields", "message"), [
    ({"outputs": ()}, "outputs is empty"),
    ({"inputs": (TensorSpec("x", "FP32", (4,)), TensorSpec("x", "FP32", (4,)))}, "duplicate names"),
    ({"inputs": (TensorSpec("x", "BF16", (4,)),)}, "datatype BF16, not one of the servable"),
    ({"inputs": (TensorSpec("x", "FP32", (-2,)),)}, "shape"),
    ({"predictor_outputs": ("a", "b")}, "predictor_outputs has 2 names for 1 outputs"),
])
def test_a_manifest_load_would_refuse_is_not_written(tmp_path, fields, message):
    with pytest.raises(ValueError, match=message):
        _manifest(**fields).write(tmp_path)
    assert not model_manifest.exists(tmp_path)


def test_a_manifest_from_before_tenants_is_the_default_tenants(tmp_path):
    doc = _manifest().to_json()
    del doc["tenant"], doc["predictor_outputs"], doc["metadata"]
    (tmp_path / MANIFEST).write_text(json.dumps(doc))
    loaded = Manifest.load(tmp_path)
    assert loaded.tenant == "" and loaded.fetch_names == ("y",) and loaded.metadata == {}
    assert storage_paths.version_tenant(tmp_path) == "default"


@pytest.mark.parametrize(("text", "message"), [
    (None, "no manifest.json"), ("{", "unreadable"), ("[]", "not an object"),
    ('{"format_version": 2}', "format_version 2"), ('{"format_version": 1}', "malformed: KeyError"),
])
def test_load_names_what_is_wrong(tmp_path, text, message):
    if text is not None:
        (tmp_path / MANIFEST).write_text(text)
    with pytest.raises(FailedPrecondition, match=message):
        Manifest.load(tmp_path)
    assert storage_paths.version_tenant(tmp_path) is None
