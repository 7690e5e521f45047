"""Runs in: a Serve replica.

The REST shell of the v2 data plane: the Open Inference Protocol's HTTP/JSON API over a DataPlane.

Beside the gRPC shell (v2_servicer.py) on the same replicas, with the same routing, weights
and errors (KServe's and Triton's REST API: curl, browsers and gateways speak only this):

    GET  /v2/health/live | /v2/health/ready       200, or 503 while nothing is routed
    GET  /v2                                      server metadata
    GET  /v2/models/{name}[/versions/{v}]         model metadata
    GET  /v2/models/{name}[/versions/{v}]/ready   200 {"name", "ready": true}
    POST /v2/models/{name}[/versions/{v}]/infer   JSON tensors; the binary tensor extension too

Tensors travel as JSON (`data`: the row-major values, flat or nested) or, with Triton's binary
extension, as raw little-endian bytes after the JSON header: the request says how long the
header is (`Inference-Header-Content-Length`) and each binary input its `binary_data_size`;
an output is returned binary when it asks `parameters.binary_data` (or the request asks
`parameters.binary_data_output`). A JSON request is turned into the ModelInferRequest the
gRPC shell decodes, so both check the same rules and say the same things. Errors are
`{"error": message}` with the HTTP status of their gRPC code.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import grpc
import numpy as np

from paddleray.inference.v2 import grpc_service_pb2 as pb
from paddleray.services.common.errors import DomainError, InvalidArgument, NotFound
from paddleray.services.exporter.serving.dtypes import NUMPY_DTYPES
from paddleray.services.exporter.serving.replica.codec import decode_response, shown
from paddleray.services.exporter.serving.replica.dataplane import DataPlane, describe

HEADER_LENGTH = "inference-header-content-length"
_MODEL_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?(/ready|/infer)?/?$")
_HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400, grpc.StatusCode.NOT_FOUND: 404, grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403, grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429, grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503, grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


@dataclass
class RestResponse:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "application/json"})


def _json(status: int, document: object) -> RestResponse:
    return RestResponse(status, json.dumps(document, separators=(",", ":")).encode())


def error_response(exc: DomainError) -> RestResponse:
    return _json(_HTTP_STATUS.get(exc.code, 500), {"error": exc.message})


async def handle(plane: DataPlane, method: str, path: str, headers: Mapping[str, str], body: bytes) -> RestResponse:
    """One HTTP request; never raises (a failure of ours is a short 500)."""
    try:
        return await _route(plane, method.upper(), path, headers, body)
    except DomainError as exc:
        return error_response(exc)
    except Exception as exc:  # noqa: BLE001 - ours: short, never a traceback
        return _json(500, {"error": f"internal error: {describe(exc)}"})


async def _route(plane: DataPlane, method: str, path: str, headers: Mapping[str, str], body: bytes) -> RestResponse:
    path = path.rstrip("/") or "/"
    if path in ("/v2/health/live", "/v2/health/ready", "/v2"):
        _only(method, "GET", path)
        if path == "/v2/health/live":
            return _json(200, {"live": plane.server_live(pb.ServerLiveRequest()).live})
        if path == "/v2/health/ready":
            ready = plane.server_ready(pb.ServerReadyRequest()).ready
            return _json(200 if ready else 503, {"ready": ready})
        server = plane.server_metadata(pb.ServerMetadataRequest())
        return _json(200, {"name": server.name, "version": server.version, "extensions": list(server.extensions)})
    found = _MODEL_PATH.match(path)
    if found is None:
        raise NotFound(f"no v2 REST resource at '{shown(path)}'")
    name, version, verb = found.group(1), found.group(2) or "", found.group(3) or ""
    if verb == "/infer":
        _only(method, "POST", path)
        request = to_infer_request(name, version, headers, body)
        response = await plane.model_infer(request)
        return from_infer_response(response, _binary_outputs(body, headers))
    _only(method, "GET", path)
    if verb == "/ready":
        plane.model_ready(pb.ModelReadyRequest(name=name, version=version))
        return _json(200, {"name": name, "ready": True})
    meta = plane.model_metadata(pb.ModelMetadataRequest(name=name, version=version))
    tensors = [[{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in ts]
               for ts in (meta.inputs, meta.outputs)]
    return _json(200, {"name": meta.name, "versions": list(meta.versions), "platform": meta.platform,
                       "inputs": tensors[0], "outputs": tensors[1]})


class MethodNotAllowed(DomainError):
    code = grpc.StatusCode.UNIMPLEMENTED


def _only(method: str, allowed: str, path: str) -> None:
    if method != allowed:
        raise MethodNotAllowed(f"{shown(method)} {shown(path)}: only {allowed}")


def _split_body(headers: Mapping[str, str], body: bytes) -> tuple[dict, bytes]:
    length = headers.get(HEADER_LENGTH)
    if length is None:
        header, binary = body, b""
    else:
        try:
            size = int(length)
        except ValueError:
            raise InvalidArgument(HEADER_LENGTH, f"an integer, not '{shown(length)}'") from None
        if not 0 <= size <= len(body):
            raise InvalidArgument(HEADER_LENGTH, f"{size} is more than the {len(body)} bytes of the body")
        header, binary = body[:size], body[size:]
    try:
        document = json.loads(header or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidArgument("body", f"not JSON: {shown(exc)}") from None
    if not isinstance(document, dict):
        raise InvalidArgument("body", "a JSON object")
    return document, binary


def _binary_outputs(body: bytes, headers: Mapping[str, str]) -> tuple[bool, set[str]]:
    """(every output binary?, the outputs asked binary), from the request (already valid)."""
    document, _ = _split_body(headers, body)
    default = bool((document.get("parameters") or {}).get("binary_data_output", False))
    asked = {o.get("name", "") for o in document.get("outputs") or [] if isinstance(o, dict)
             and (o.get("parameters") or {}).get("binary_data")}
    return default, asked


def to_infer_request(name: str, version: str, headers: Mapping[str, str], body: bytes) -> pb.ModelInferRequest:
    """A v2 REST infer body -> the ModelInferRequest the gRPC shell would get (raw tensors)."""
    document, binary = _split_body(headers, body)
    request = pb.ModelInferRequest(model_name=name, model_version=version, id=str(document.get("id") or ""))
    inputs = document.get("inputs")
    if not isinstance(inputs, list):
        raise InvalidArgument("inputs", "a list of tensors")
    offset = 0
    for i, tensor in enumerate(inputs):
        where = f"inputs[{i}]"
        if not isinstance(tensor, dict):
            raise InvalidArgument(where, "a tensor object with name, shape, datatype and data")
        tname, datatype, shape = tensor.get("name"), tensor.get("datatype"), tensor.get("shape")
        if not isinstance(tname, str):
            raise InvalidArgument(f"{where}.name", "a string")
        if not isinstance(datatype, str):
            raise InvalidArgument(f"{where}.datatype", "a string")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise InvalidArgument(f"{where}.shape", "a list of integers >= 0")
        request.inputs.add(name=tname, datatype=datatype, shape=shape)
        dtype = NUMPY_DTYPES.get(datatype)
        size = ((tensor.get("parameters") or {}) if isinstance(tensor.get("parameters"), dict) else {}).get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or size < 0 or offset + size > len(binary):
                raise InvalidArgument(f"{where}.parameters.binary_data_size",
                                      f"{shown(size)} does not fit the {len(binary) - offset} binary bytes left")
            request.raw_input_contents.append(binary[offset:offset + size])
            offset += size
            continue
        if dtype is None:
            # The gRPC decoder names the datatype rule; an empty tensor gets it there.
            request.raw_input_contents.append(b"")
            continue
        data = tensor.get("data")
        if data is None:
            raise InvalidArgument(f"{where}.data", "required (or parameters.binary_data_size with binary data)")
        try:
            values = np.asarray(data, dtype=dtype.newbyteorder("="))
        except (TypeError, ValueError, OverflowError):
            raise InvalidArgument(f"{where}.data", f"values of {datatype} (a flat or nested list)") from None
        if values.size != math.prod(shape):
            raise InvalidArgument(f"{where}.data", f"{values.size} values given, shape {shown(shape)} needs {math.prod(shape)}")
        request.raw_input_contents.append(np.ascontiguousarray(values, dtype=dtype).tobytes())
    if offset != len(binary):
        raise InvalidArgument("body", f"{len(binary) - offset} binary bytes no input claims")
    for i, out in enumerate(document.get("outputs") or []):
        if not isinstance(out, dict) or not isinstance(out.get("name"), str):
            raise InvalidArgument(f"outputs[{i}].name", "a string")
        request.outputs.add(name=out["name"])
    return request


def from_infer_response(response: pb.ModelInferResponse, binary: tuple[bool, set[str]]) -> RestResponse:
    every, asked = binary
    outputs, chunks = [], []
    arrays = decode_response(response)
    for tensor in response.outputs:
        entry: dict = {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)}
        array = arrays[tensor.name]
        if every or tensor.name in asked:
            raw = np.ascontiguousarray(array, dtype=NUMPY_DTYPES[tensor.datatype]).tobytes()
            entry["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            entry["data"] = array.ravel().tolist()
        outputs.append(entry)
    document = {"model_name": response.model_name, "model_version": response.model_version, "outputs": outputs}
    if response.id:
        document["id"] = response.id
    header = json.dumps(document, separators=(",", ":")).encode()
    if not chunks:
        return RestResponse(200, header)
    return RestResponse(200, header + b"".join(chunks), {"content-type": "application/octet-stream",
                                                         HEADER_LENGTH: str(len(header))})
