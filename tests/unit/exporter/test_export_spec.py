"""ExportModel's request rules that need no store or cluster."""

from __future__ import annotations

import pytest

from paddleray.exporter.v1 import exporter_service_pb2 as es
from paddleray.services.common import errors
from paddleray.services.common.checkpoints import CheckpointStore
from paddleray.services.exporter.export.export_spec import export_spec


def _request(config: dict, storage_root) -> es.ExportModelRequest:
    staged = storage_root / "staged"
    staged.mkdir(exist_ok=True)
    checkpoint = CheckpointStore(storage_root / "checkpoints" / "c").commit(staged, step=0, epoch=1, metrics={})
    request = es.ExportModelRequest(parent="models/m", checkpoint_uri=str(checkpoint.path), model_builder="pkg.model:build")
    request.model_config.update(config)
    return request


@pytest.mark.parametrize(("config", "field"), [
    ({"lr": float("nan")}, "model_config.lr"),
    ({"layers": [1.0, float("inf")]}, "model_config.layers[1]"),
])
def test_a_model_config_follows_the_training_config_rules(config, field, tmp_path):
    with pytest.raises(errors.InvalidArgument) as caught:
        export_spec(_request(config, tmp_path), tmp_path)
    assert caught.value.field == field


def test_a_model_config_nested_too_deep_is_refused(tmp_path):
    config: dict = {}
    node = config
    for _ in range(30):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(errors.InvalidArgument) as caught:
        export_spec(_request(config, tmp_path), tmp_path)
    assert caught.value.field.startswith("model_config.x") and "nested" in str(caught.value)


@pytest.mark.parametrize("uri", ["\0", "checkpoints/a\0b", "file://\0"])
def test_a_checkpoint_uri_with_a_nul_character_is_invalid_naming_the_field(tmp_path, uri):
    # Found by tests/reliability: Path.resolve() raised ValueError ("embedded null byte"), answered INTERNAL.
    request = es.ExportModelRequest(parent="models/m", checkpoint_uri=uri, model_builder="pkg.model:build")
    with pytest.raises(errors.InvalidArgument) as caught:
        export_spec(request, tmp_path)
    assert caught.value.field == "checkpoint_uri" and "NUL" in str(caught.value)


@pytest.mark.parametrize(("sizes", "field"), [
    ([16, 0], "validation.dynamic_sizes[1]"),
    ([-3], "validation.dynamic_sizes[0]"),
    ([4097], "validation.dynamic_sizes[0]"),
    (list(range(1, 18)), "validation.dynamic_sizes"),
])
def test_dynamic_sizes_out_of_range_are_invalid_naming_the_entry(sizes, field, tmp_path):
    request = _request({}, tmp_path)
    request.validation.dynamic_sizes.extend(sizes)
    with pytest.raises(errors.InvalidArgument) as caught:
        export_spec(request, tmp_path)
    assert caught.value.field == field


def test_dynamic_sizes_reach_the_validation_options(tmp_path):
    request = _request({}, tmp_path)
    request.validation.dynamic_sizes.extend([24, 200])
    assert export_spec(request, tmp_path).validation.dynamic_sizes == (24, 200)
    assert export_spec(_request({}, tmp_path), tmp_path).validation.dynamic_sizes == ()
