"""Real exported artifacts for the serving tests: tiny Paddle models through to_static + jit.save.

Writes the layout of services/exporter/serving/artifact.py (the exporter's contract), so the
serving tests need no exporter. Also returns the dynamic model, the reference for outputs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from paddleray.services.exporter.serving.artifact import write_manifest


def _mlp(hidden: int):
    import paddle

    class MLP(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc1 = paddle.nn.Linear(64, hidden)
            self.fc2 = paddle.nn.Linear(hidden, 10)

        def forward(self, x):
            return self.fc2(paddle.nn.functional.relu(self.fc1(x)))

    return MLP()


def _two_in_two_out():
    import paddle

    class TwoInTwoOut(paddle.nn.Layer):
        """x FP32 [-1, 4] and n INT64 [-1, 1] -> y FP32 [-1, 3] and m INT64 [-1, 1] (= 2 n)."""

        def __init__(self):
            super().__init__()
            self.fc = paddle.nn.Linear(4, 3)

        def forward(self, x, n):
            return self.fc(x) + n.astype("float32"), n * 2

    return TwoInTwoOut()


def export_model(
    directory: Path, kind: str = "mlp", seed: int = 0, version: int = 1, hidden: int = 64, onnx: bool = False
):
    """Exports a freshly seeded model into directory; returns (artifact_dir, dynamic model)."""
    import paddle
    from paddle.static import InputSpec

    paddle.seed(seed)
    if kind == "mlp":
        model = _mlp(hidden)
        specs = [InputSpec([None, 64], "float32", "x")]
        inputs = [{"name": "x", "datatype": "FP32", "shape": [-1, 64]}]
        outputs = [{"name": "fetch_name_0", "datatype": "FP32", "shape": [-1, 10]}]
    elif kind == "two":
        model = _two_in_two_out()
        specs = [InputSpec([None, 4], "float32", "x"), InputSpec([None, 1], "int64", "n")]
        inputs = [
            {"name": "x", "datatype": "FP32", "shape": [-1, 4]},
            {"name": "n", "datatype": "INT64", "shape": [-1, 1]},
        ]
        outputs = [
            {"name": "y", "datatype": "FP32", "shape": [-1, 3]},
            {"name": "m", "datatype": "INT64", "shape": [-1, 1]},
        ]
    else:
        raise ValueError(kind)
    model.eval()
    directory.mkdir(parents=True, exist_ok=True)
    static = paddle.jit.to_static(model, input_spec=specs, full_graph=True)
    paddle.jit.save(static, str(directory / "paddle" / "inference"))
    artifacts = {"paddle": "paddle"}
    if onnx:
        # The exporter's own conversion: paddle2onnx's default polygraphy pass pip-installs at run time.
        from paddleray.services.exporter.export_task import write_onnx

        write_onnx(directory)
        artifacts["onnx"] = "onnx/model.onnx"
    write_manifest(directory, {
        "format_version": 1,
        "model": f"models/{kind}",
        "version": f"models/{kind}/versions/{version}",
        "inputs": inputs,
        "outputs": outputs,
        "artifacts": artifacts,
        "predictor_outputs": [f"fetch_name_{i}" for i in range(len(outputs))],
    })
    return directory, model


def dynamic_forward(model, *arrays: np.ndarray) -> list[np.ndarray]:
    import paddle

    with paddle.no_grad():
        out = model(*(paddle.to_tensor(a) for a in arrays))
    return [o.numpy() for o in (out if isinstance(out, (tuple, list)) else [out])]
