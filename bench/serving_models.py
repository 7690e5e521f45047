"""The serving benchmark's models, exported as the exporter does (to_static + jit.save + manifest).

mlp: the digits MLP's architecture (64-64-10), where serving overhead dwarfs compute.
wide: 64-2048-(2048x2)-10, whose single request computes for a few ms with oneDNN on one thread
(the bench's wide_bs1_ms / wide_bs32_ms: 1.5-2.5 ms idle, 5.4 ms for one row and 7.5 ms for 32 under
load 20), so 32 rows cost about 1.4x one row: the batching case. (The "tens of ms a request" once written here was
the predictor clone Serve's thread-per-call forced on every request, issue 20.1, not the model.)
"""

from __future__ import annotations

from pathlib import Path

from paddleray.services.common.model_manifest import Manifest, TensorSpec


def build(kind: str):
    import paddle

    paddle.seed(0)
    width, depth = {"mlp": (64, 0), "wide": (2048, 2)}[kind]
    layers = [paddle.nn.Linear(64, width), paddle.nn.ReLU()]
    for _ in range(depth):
        layers += [paddle.nn.Linear(width, width), paddle.nn.ReLU()]
    layers.append(paddle.nn.Linear(width, 10))
    return paddle.nn.Sequential(*layers).eval()


def export(model, directory: Path, onnx: bool) -> Path:
    import paddle
    from paddle.static import InputSpec

    static = paddle.jit.to_static(model, input_spec=[InputSpec([None, 64], "float32", "x")], full_graph=True)
    paddle.jit.save(static, str(directory / "paddle" / "inference"))
    artifacts = {"paddle": "paddle"}
    if onnx:
        # The exporter's conversion (opset, and no polygraphy pass: that pip-installs at run time).
        from paddleray.services.exporter.export.task.export_task import write_onnx

        write_onnx(directory)
        artifacts["onnx"] = "onnx/model.onnx"
    Manifest(
        model="models/bench", version="models/bench/versions/1",
        inputs=(TensorSpec("x", "FP32", (-1, 64)),), outputs=(TensorSpec("fetch_name_0", "FP32", (-1, 10)),),
        artifacts=artifacts, predictor_outputs=("fetch_name_0",),
    ).write(directory)
    return directory
