"""Runs in: a Serve replica.

Open Inference Protocol v2 tensors <-> numpy arrays, checked against the model's signature.

Both encodings of the protocol are read: typed `contents` and `raw_input_contents`
(row-major little-endian bytes). The answer uses the encoding the request used, so a typed
client gets typed contents back and a raw one (tritonclient) gets raw_output_contents.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from paddleray.inference.v2 import grpc_service_pb2 as pb
from paddleray.services.common.errors import InvalidArgument
from paddleray.services.exporter.serving.artifact import Signature, TensorSpec
from paddleray.services.exporter.serving.dtypes import CONTENTS_FIELD, NUMPY_DTYPES, V2_DATATYPES

# The longest client-given value an error message repeats (a 100 KB name would otherwise make
# the status itself too big for the client to read).
SHOWN_CHARS = 64


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """A client-given value as error messages repeat it: at most `limit` characters of it."""
    text = str(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def decode_inputs(request: pb.ModelInferRequest, signature: Signature) -> dict[str, np.ndarray]:
    """The request's input tensors as arrays; InvalidArgument names the input and what was expected."""
    specs = {t.name: t for t in signature.inputs}
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise InvalidArgument("raw_input_contents", f"{len(raw)} given for {len(request.inputs)} inputs (one each)")
    arrays: dict[str, np.ndarray] = {}
    for i, tensor in enumerate(request.inputs):
        spec = specs.get(tensor.name)
        if spec is None:
            raise InvalidArgument(f"inputs[{i}].name", f"unknown input '{shown(tensor.name)}'; the model takes {_names(signature.inputs)}")
        if tensor.name in arrays:
            raise InvalidArgument(f"inputs[{i}].name", f"input '{shown(tensor.name)}' is given twice")
        field = f"inputs[{shown(tensor.name)}]"
        _check_header(field, tensor, spec)
        arrays[tensor.name] = _decode(field, tensor, raw[i] if raw else None)
    missing = [t.name for t in signature.inputs if t.name not in arrays]
    if missing:
        raise InvalidArgument("inputs", f"missing input {', '.join(repr(n) for n in missing)}; the model takes {_names(signature.inputs)}")
    return arrays


def _check_header(field: str, tensor: pb.ModelInferRequest.InferInputTensor, spec: TensorSpec) -> None:
    if tensor.datatype != spec.datatype:
        raise InvalidArgument(f"{field}.datatype", f"{shown(tensor.datatype or 'none')} given, the model expects {spec.datatype}")
    shape = list(tensor.shape)
    fits = len(shape) == len(spec.shape) and all(
        got >= 0 and (want == -1 or got == want) for got, want in zip(shape, spec.shape, strict=True)
    )
    if not fits:
        raise InvalidArgument(f"{field}.shape", f"{shown(shape)} given, the model expects {list(spec.shape)} (-1: any size)")


def _decode(field: str, tensor: pb.ModelInferRequest.InferInputTensor, raw: bytes | None) -> np.ndarray:
    dtype = NUMPY_DTYPES.get(tensor.datatype)
    if dtype is None:
        raise InvalidArgument(f"{field}.datatype", f"{shown(tensor.datatype)} is not supported here")
    shape = tuple(tensor.shape)
    count = math.prod(shape)
    if raw is not None:
        if tensor.HasField("contents") and tensor.contents.ByteSize():
            raise InvalidArgument(f"{field}.contents", "must be empty when raw_input_contents is used")
        if len(raw) != count * dtype.itemsize:
            raise InvalidArgument(
                f"raw_input_contents[{field}]", f"{len(raw)} bytes given, shape {list(shape)} of {tensor.datatype} needs {count * dtype.itemsize}"
            )
        return np.frombuffer(raw, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="), copy=False)
    contents_field = CONTENTS_FIELD.get(tensor.datatype)
    if contents_field is None:
        raise InvalidArgument(f"{field}.contents", f"{tensor.datatype} travels only in raw_input_contents")
    values = getattr(tensor.contents, contents_field)
    if len(values) != count:
        raise InvalidArgument(
            f"{field}.contents.{contents_field}", f"{len(values)} values given, shape {list(shape)} needs {count}"
        )
    return np.asarray(values, dtype=dtype.newbyteorder("=")).reshape(shape)


def requested_outputs(request: pb.ModelInferRequest, signature: Signature) -> list[str]:
    """Names of the outputs to return, in order: the requested ones, or every output."""
    known = [t.name for t in signature.outputs]
    names = []
    for i, out in enumerate(request.outputs):
        if out.name not in known:
            raise InvalidArgument(f"outputs[{i}].name", f"unknown output '{shown(out.name)}'; the model has {_names(signature.outputs)}")
        names.append(out.name)
    return names or known


def encode_response(
    request: pb.ModelInferRequest, version: str, outputs: Mapping[str, np.ndarray], names: Sequence[str]
) -> pb.ModelInferResponse:
    response = pb.ModelInferResponse(model_name=request.model_name, model_version=version, id=request.id)
    raw = bool(request.raw_input_contents)
    for name in names:
        array = np.asarray(outputs[name])
        datatype = V2_DATATYPES.get(array.dtype.newbyteorder("="))
        if datatype is None:
            raise TypeError(f"output '{name}' has dtype {array.dtype}, which v2 cannot carry")
        tensor = response.outputs.add(name=name, datatype=datatype, shape=array.shape)
        if raw or datatype not in CONTENTS_FIELD:
            response.raw_output_contents.append(np.ascontiguousarray(array, dtype=NUMPY_DTYPES[datatype]).tobytes())
        else:
            getattr(tensor.contents, CONTENTS_FIELD[datatype]).extend(array.ravel().tolist())
    return response


def encode_request(
    model_name: str, inputs: Mapping[str, np.ndarray], version: str = "", raw: bool = True, request_id: str = ""
) -> pb.ModelInferRequest:
    """A ModelInferRequest carrying these arrays (for clients and tests of our own)."""
    request = pb.ModelInferRequest(model_name=model_name, model_version=version, id=request_id)
    for name, array in inputs.items():
        array = np.asarray(array)
        datatype = V2_DATATYPES[array.dtype.newbyteorder("=")]
        tensor = request.inputs.add(name=name, datatype=datatype, shape=array.shape)
        if raw:
            request.raw_input_contents.append(np.ascontiguousarray(array, dtype=NUMPY_DTYPES[datatype]).tobytes())
        else:
            getattr(tensor.contents, CONTENTS_FIELD[datatype]).extend(array.ravel().tolist())
    return request


def decode_response(response: pb.ModelInferResponse) -> dict[str, np.ndarray]:
    """The response's outputs as arrays, from either encoding."""
    arrays = {}
    for i, tensor in enumerate(response.outputs):
        dtype = NUMPY_DTYPES[tensor.datatype]
        if response.raw_output_contents:
            array = np.frombuffer(response.raw_output_contents[i], dtype=dtype)
        else:
            array = np.asarray(getattr(tensor.contents, CONTENTS_FIELD[tensor.datatype]), dtype=dtype)
        arrays[tensor.name] = array.reshape(tuple(tensor.shape)).astype(dtype.newbyteorder("="), copy=False)
    return arrays


def _names(tensors: Sequence[TensorSpec]) -> str:
    return ", ".join(f"{t.name} ({t.datatype} {list(t.shape)})" for t in tensors)
