"""Real exported artifacts for the serving tests: tiny Paddle models through to_static + jit.save.

Writes the layout of services/exporter/serving/artifact.py (the exporter's contract), so the
serving tests need no exporter. Also returns the dynamic model, the reference for outputs.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np

from paddleray.services.common.model_manifest import Manifest, TensorSpec
from support.paddle_modes import import_on_main_thread

# Its helpers may run Paddle on a service's event-loop thread: Paddle's first import must not be there.
import_on_main_thread()


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
        from paddleray.services.exporter.export.task.export_task import write_onnx

        write_onnx(directory)
        artifacts["onnx"] = "onnx/model.onnx"
    Manifest(
        model=f"models/{kind}", version=f"models/{kind}/versions/{version}",
        inputs=tuple(TensorSpec.from_dict(t) for t in inputs), outputs=tuple(TensorSpec.from_dict(t) for t in outputs),
        artifacts=artifacts, predictor_outputs=tuple(f"fetch_name_{i}" for i in range(len(outputs))),
    ).write(directory)
    return directory, model


def dynamic_forward(model, *arrays: np.ndarray) -> list[np.ndarray]:
    import paddle

    with paddle.no_grad():
        out = model(*(paddle.to_tensor(a) for a in arrays))
    return [o.numpy() for o in (out if isinstance(out, (tuple, list)) else [out])]


class _Application(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                   grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds `application: <model>` to every call: Serve's HAProxy routes between apps by it."""

    def __init__(self, application: str) -> None:
        self._metadata = (("application", application),)

    def _details(self, details):
        return details._replace(metadata=tuple(details.metadata or ()) + self._metadata)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)

    def intercept_stream_stream(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)


def application_channel(address: str, application: str, options=None) -> grpc.Channel:
    """A channel to the v2 endpoint whose calls go to `application` (a model's serving name)."""
    return grpc.intercept_channel(grpc.insecure_channel(address, options=options), _Application(application))


def v2_stub(channel: grpc.Channel):
    from paddleray.inference.v2 import grpc_service_pb2_grpc

    return grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)


def rest_infer(http_endpoint: str, inputs: dict, version: str = "", timeout: float = 30) -> tuple[str, dict]:
    """POST <http_endpoint>[/versions/<v>]/infer with JSON tensors (a deployment's http_endpoint);
    returns (model_version, outputs by name as float arrays)."""
    import json
    import urllib.request

    from paddleray.services.exporter.serving.dtypes import V2_DATATYPES

    body = {"inputs": [{"name": n, "shape": list(a.shape), "datatype": V2_DATATYPES[a.dtype.newbyteorder("=")],
                        "data": a.ravel().tolist()} for n, a in inputs.items()]}
    url = f"{http_endpoint}{f'/versions/{version}' if version else ''}/infer"
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        document = json.loads(answer.read())
    return document["model_version"], {o["name"]: np.asarray(o["data"]).reshape(o["shape"]) for o in document["outputs"]}
