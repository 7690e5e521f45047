"""The SDK's Open Inference Protocol v2 client (inference.GRPCInferenceService): the endpoint
Ray Serve's HAProxy serves for every deployment, callable by any stock v2 client too.

Serve's HAProxy sends a call to the application its `application` metadata names, and each
deployment is the application named by its serving_name: every call here carries the model it
is about (a request's model_name or name), and server-level calls go to the server
application, which answers them for the whole endpoint."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import grpc
import numpy as np

from paddleray.inference.v2 import grpc_service_pb2, grpc_service_pb2_grpc
from paddleray.services.client import tensors
from paddleray.services.client.errors import ConfigError
from paddleray.services.exporter.serving.control.serve_config import SERVER_APP


class _RouteByModel(grpc.UnaryUnaryClientInterceptor):
    """`application: <the model the request names>` on every unary call (the server app's name
    for server-level calls)."""

    def intercept_unary_unary(self, continuation, details, request):
        application = getattr(request, "model_name", "") or getattr(request, "name", "") or SERVER_APP
        metadata = tuple(details.metadata or ()) + (("application", application),)
        return continuation(details._replace(metadata=metadata), request)


@dataclass(frozen=True)
class Prediction:
    """A ModelInfer answer: the model and version that served it, and its outputs by name (in
    the response's order)."""

    model_name: str
    model_version: str
    outputs: dict[str, np.ndarray]

    def as_data(self) -> dict:
        return {
            "model_name": self.model_name, "model_version": self.model_version,
            "outputs": [{"name": name, "datatype": tensors.v2_datatype(array, name), "shape": list(array.shape),
                         "data": array.tolist()} for name, array in self.outputs.items()],
        }


class Inference:
    """One v2 endpoint. Its address: the one given, else the client's inference_address setting
    (Client.inference also finds it from the deployment that serves a model)."""

    def __init__(self, client, address: str = "") -> None:
        self._client = client
        self.address = address or client.settings.inference_address
        if not self.address:
            raise ConfigError("no inference address: pass --inference-address or set PADDLERAY_INFERENCE_ADDRESS")
        self.stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(
            grpc.intercept_channel(client.open(self.address), _RouteByModel()))

    def _call(self, method, request):
        return self._client.call(method, request, address=self.address)

    def server_live(self) -> bool:
        return self._call(self.stub.ServerLive, grpc_service_pb2.ServerLiveRequest()).live

    def server_ready(self) -> bool:
        return self._call(self.stub.ServerReady, grpc_service_pb2.ServerReadyRequest()).ready

    def model_metadata(self, model: str, version: str = "") -> grpc_service_pb2.ModelMetadataResponse:
        """Inputs and outputs (name, datatype, shape) of the version, or of the newest one
        taking traffic; the versions served. NOT_FOUND for a model or version not served."""
        return self._call(self.stub.ModelMetadata, grpc_service_pb2.ModelMetadataRequest(name=model, version=version))

    def infer(self, model: str, inputs: Mapping[str, np.ndarray], version: str = "") -> dict[str, np.ndarray]:
        """Runs the model on named arrays (their dtypes as they are); returns its outputs by name."""
        return self.predict(model, inputs, version, conform=False).outputs

    def predict(self, model: str, inputs: Mapping[str, np.ndarray], version: str = "", conform: bool = True) -> Prediction:
        """ModelInfer. With conform, the inputs are first fitted to the model's metadata: an
        unnamed input ("") is the model's only one, and numbers are converted to each input's
        datatype (tensors.conform), so arrays read from JSON work as they are."""
        if conform:
            inputs = self._conformed(model, version, inputs)
        request = grpc_service_pb2.ModelInferRequest(model_name=model, model_version=version)
        for name, array in inputs.items():
            array = np.ascontiguousarray(array)
            request.inputs.add(name=name, datatype=tensors.v2_datatype(array, name), shape=array.shape)
            request.raw_input_contents.append(array.tobytes())
        response = self._call(self.stub.ModelInfer, request)
        return Prediction(response.model_name, response.model_version, _outputs(response))

    def _conformed(self, model: str, version: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        metadata = self.model_metadata(model, version)
        declared = {t.name: t.datatype for t in metadata.inputs}
        named: dict[str, np.ndarray] = {}
        for name, array in inputs.items():
            if not name:
                if len(declared) != 1:
                    raise ConfigError(f"name each input (NAME=...): model {model!r} takes {', '.join(declared) or 'none'}")
                name = next(iter(declared))
            if name in named:
                raise ConfigError(f"input {name!r} is given twice")
            named[name] = tensors.conform(np.asarray(array), declared[name], f"input {name!r}") if name in declared else array
        return named


def _outputs(response: grpc_service_pb2.ModelInferResponse) -> dict[str, np.ndarray]:
    outputs = {}
    for index, output in enumerate(response.outputs):
        dtype = tensors.V2_DTYPES[output.datatype]
        if index < len(response.raw_output_contents):
            data = np.frombuffer(response.raw_output_contents[index], dtype=dtype)
        else:
            field = tensors.CONTENTS_FIELD.get(output.datatype, "fp32_contents")
            data = np.asarray(getattr(output.contents, field), dtype=dtype)
        outputs[output.name] = data.reshape(tuple(output.shape))
    return outputs
