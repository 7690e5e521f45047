"""The serving benchmark's models, exported as the exporter does (to_static + jit.save + manifest).

mlp: the digits MLP's architecture (64-64-10), where serving overhead dwarfs compute.
wide: 64-2048-(2048x2)-10, whose single request computes for tens of ms with oneDNN (the
batching case: 32 rows cost ~3x one row, measured 35 ms vs 111 ms under load).
"""

from __future__ import annotations

from pathlib import Path

from paddleray.services.exporter.serving.artifact import write_manifest


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
        from paddleray.services.exporter.export_task import write_onnx

        write_onnx(directory)
        artifacts["onnx"] = "onnx/model.onnx"
    write_manifest(directory, {
        "format_version": 1, "model": "models/bench", "version": "models/bench/versions/1",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 64]}],
        "outputs": [{"name": "fetch_name_0", "datatype": "FP32", "shape": [-1, 10]}],
        "artifacts": artifacts, "predictor_outputs": ["fetch_name_0"],
    })
    return directory
