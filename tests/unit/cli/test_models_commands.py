"""How `models get` / `models export --wait` show a version: per-sample validation rows when the
samples had different shapes (a free width), and the metadata a client decodes with."""

from __future__ import annotations

import pytest

from paddleray.exporter.v1 import model_pb2
from paddleray.services.cli import models_commands

pytestmark = pytest.mark.unit


def _version(widths) -> model_pb2.ModelVersion:
    version = model_pb2.ModelVersion(name="models/ocr/versions/1", state=model_pb2.MODEL_VERSION_STATE_READY)
    version.validation.passed, version.validation.num_samples = True, len(widths)
    for backend, error in ((model_pb2.BACKEND_PADDLE_INFERENCE, 0.0), (model_pb2.BACKEND_ONNX_RUNTIME, 3.6e-7)):
        checked = version.validation.backends.add(backend=backend, passed=True, max_abs_error=error)
        for width in widths:
            sample = checked.samples.add(passed=True, max_abs_error=error)
            sample.inputs.add(name="x", shape=[4, 1, 32, width], datatype=model_pb2.DATA_TYPE_FP32)
    return version


def test_samples_of_several_widths_get_a_row_each_with_every_backends_error(capsys):
    version = _version([16, 128])
    version.metadata.update({"charset": "0123年", "decoder": "ctc_greedy"})
    models_commands.print_version(version)
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "x [4, 1, 32," in line]
    assert len(rows) == 2 and rows[1].split()[-2:] == ["0.00e+00", "3.60e-07"], out
    assert "ONNX_RUNTIME MAX ABS" in out
    assert '"charset": "0123年"' in out  # verbatim, not escaped


def test_samples_of_one_shape_add_no_rows(capsys):
    models_commands.print_validation(_version([8, 8]))
    assert "x [4, 1, 32, 8]" not in capsys.readouterr().out
