"""The export task on a model that is not an MLP: the text-line recognizer (conv + BiLSTM, a free
width), run in process as the Ray task would run it. What the MLPs never needed: samples at
several widths, output dimensions that follow the width, and metadata a client decodes with."""

from __future__ import annotations

import json
import textwrap

import pytest

from paddleray.exporter.v1 import model_pb2
from paddleray.services.common.model_manifest import Manifest, TensorSpec
from paddleray.services.exporter.export.task import export_task, validate
from paddleray.services.exporter.export.task.export_records import (
    Exported,
    ExportRequest,
    Failed,
    Validated,
    ValidationOptions,
)
from paddleray.services.exporter.registry import convert
from paddleray.services.trainer.examples import crnn, loop, text_lines

pytestmark = pytest.mark.unit
CRNN = "paddleray.services.trainer.examples.crnn:build_model"


def _checkpoint(tmp_path, builder=crnn.build_model, config=None):
    import paddle

    with paddle.utils.unique_name.guard():
        model = builder(config or {})
    directory = tmp_path / "checkpoint"
    directory.mkdir()
    paddle.save(model.state_dict(), str(directory / loop.MODEL_FILE))
    return directory


def _request(tmp_path, checkpoint, builder=CRNN, formats=("paddle",), **validation):
    return ExportRequest(builder=builder, checkpoint_dir=str(checkpoint), version_dir=str(tmp_path / "version"),
                         model="models/m", version="models/m/versions/1", formats=formats,
                         validation=ValidationOptions(**validation))


def _phases(request) -> tuple[Exported, Validated]:
    phases = list(export_task.run_export(request))
    assert not any(isinstance(p, Failed) for p in phases), phases
    exported, validated = phases
    assert isinstance(exported, Exported) and isinstance(validated, Validated)
    return exported, validated


def test_a_free_width_is_checked_at_each_size_and_the_time_steps_stay_dynamic(tmp_path):
    exported, validation = _phases(_request(tmp_path, _checkpoint(tmp_path), formats=("paddle", "onnx")))
    manifest = exported.manifest
    assert manifest.inputs == (TensorSpec("x", "FP32", (-1, 1, 32, -1)),)
    classes = len(text_lines.DEFAULT_CHARSET) + 1
    # The probes at 2 rows x 16 columns and 3 rows x 128 give 4 and 32 time steps: -1. Probing
    # every dynamic dimension at 2 and 3 (as before) gave 4 steps both times (the model pads
    # narrow lines to 16 columns) and declared the time axis fixed.
    assert manifest.outputs == (TensorSpec("fetch_name_0", "FP32", (-1, -1, classes)),)
    assert manifest.metadata == crnn.export_metadata({})
    # What the task reports is what it wrote, and what serving will read.
    assert Manifest.load(tmp_path / "version") == manifest
    saved = json.loads((tmp_path / "version" / export_task.MANIFEST).read_text())
    assert saved["metadata"]["charset"] == text_lines.DEFAULT_CHARSET

    assert validation.passed, validation
    for backend in validation.backends:
        assert [s.inputs[0].shape for s in backend.samples] == [(4, 1, 32, w) for w in (16, 32, 64, 128)]
        assert all(s.passed and s.max_abs_error <= 1e-5 for s in backend.samples), backend
        assert backend.max_abs_error == max(s.max_abs_error for s in backend.samples)
    assert [b.backend for b in validation.backends] == ["paddle", "onnx"]

    version = model_pb2.ModelVersion()
    convert.apply_exported(version, exported)
    convert.apply_validation(version, validation)
    assert version.metadata["charset"] == text_lines.DEFAULT_CHARSET and version.metadata["decoder"] == "ctc_greedy"
    onnx = version.validation.backends[1]
    assert [list(s.inputs[0].shape)[3] for s in onnx.samples] == [16, 32, 64, 128]
    assert onnx.samples[0].inputs[0].datatype == model_pb2.DATA_TYPE_FP32 and onnx.samples[0].passed


def test_the_request_chooses_the_widths(tmp_path):
    _, validated = _phases(_request(tmp_path, _checkpoint(tmp_path), num_samples=3, batch_size=2,
                                    dynamic_sizes=(8, 200)))
    (paddle_check,) = validated.backends
    assert [s.inputs[0].shape for s in paddle_check.samples] == [(2, 1, 32, 8), (2, 1, 32, 200), (2, 1, 32, 8)]


def test_only_the_first_dynamic_dimension_is_the_batch(tmp_path):
    import numpy as np

    batches = validate.sample_inputs((TensorSpec("ids", "INT64", (-1, -1)), TensorSpec("mask", "FP32", (2, -1))),
                                     ValidationOptions(batch_size=3, num_samples=2, dynamic_sizes=(5, 9)))
    assert [(b["ids"].shape, b["mask"].shape) for b in batches] == [((3, 5), (2, 5)), ((3, 9), (2, 9))]
    assert batches[0]["ids"].dtype == np.int64


def test_samples_too_large_to_hold_are_refused_before_any_is_made():
    # Each field in range; together 64 x 1024 x 32 x 4096 floats: 32 GiB.
    with pytest.raises(ValueError, match=r"32,768 MiB \(input x \[1024, 1, 32, 4096\]\).*validation.batch_size"):
        validate.sample_inputs((TensorSpec("x", "FP32", (-1, 1, 32, -1)),),
                               ValidationOptions(batch_size=1024, num_samples=64, dynamic_sizes=(4096,)))


BUILDERS = """
import paddle

def build(config):
    return paddle.nn.Linear(4, 2)

def input_spec():
    return [paddle.static.InputSpec([None, 4], "float32", "x")]
"""


@pytest.mark.parametrize(("hook", "says"), [
    ("return {'labels': object()}", "not plain JSON"),
    ("return ['a']", "not a dict with string keys"),
    ("return {'labels': 'x' * 70000}", "more than 65,536"),
])
def test_metadata_that_cannot_be_recorded_fails_the_export_saying_why(tmp_path, monkeypatch, hook, says):
    module = f"export_hook_{abs(hash(hook))}"
    (tmp_path / f"{module}.py").write_text(BUILDERS + f"\ndef export_metadata(config):\n    {hook}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    checkpoint = _checkpoint(tmp_path, lambda _config: __import__(module).build({}))
    phases = list(export_task.run_export(_request(tmp_path, checkpoint, builder=f"{module}:build")))
    assert isinstance(phases[-1], Failed) and "export_metadata" in phases[-1].reason, phases
    assert says in phases[-1].reason


def test_a_model_without_the_hook_has_no_metadata(tmp_path, monkeypatch):
    (tmp_path / "export_plain.py").write_text(textwrap.dedent(BUILDERS))
    monkeypatch.syspath_prepend(str(tmp_path))
    checkpoint = _checkpoint(tmp_path, lambda _config: __import__("export_plain").build({}))
    exported, _ = _phases(_request(tmp_path, checkpoint, builder="export_plain:build"))
    assert exported.manifest.metadata == {} and "metadata" not in exported.manifest.to_json()
    version = model_pb2.ModelVersion()
    convert.apply_exported(version, exported)
    assert not version.HasField("metadata")
