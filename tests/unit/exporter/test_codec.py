from __future__ import annotations

import numpy as np
import pytest

from paddleray.inference.v2 import grpc_service_pb2 as pb
from paddleray.services.common.errors import InvalidArgument
from paddleray.services.exporter.serving.artifact import Signature, TensorSpec
from paddleray.services.exporter.serving.replica import codec

SIG = Signature(
    inputs=(TensorSpec("x", "FP32", (-1, 4)), TensorSpec("n", "INT64", (-1, 1))),
    outputs=(TensorSpec("y", "FP32", (-1, 3)), TensorSpec("m", "INT64", (-1, 1))),
)
ARRAYS = {"x": np.arange(8, dtype=np.float32).reshape(2, 4), "n": np.array([[3], [-4]], dtype=np.int64)}


@pytest.mark.parametrize("raw", [True, False])
def test_both_encodings_decode_to_the_same_arrays(raw):
    request = codec.encode_request("two", ARRAYS, raw=raw)
    assert bool(request.raw_input_contents) is raw
    decoded = codec.decode_inputs(request, SIG)
    for name, array in ARRAYS.items():
        assert decoded[name].dtype == array.dtype and np.array_equal(decoded[name], array)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.int8, np.uint8, np.bool_])
@pytest.mark.parametrize("raw", [True, False])
def test_datatypes_round_trip(dtype, raw):
    name = codec.V2_DATATYPES[np.dtype(dtype)]
    sig = Signature((TensorSpec("a", name, (-1, 3)),), (TensorSpec("a", name, (-1, 3)),))
    array = (np.arange(6).reshape(2, 3) % 2 if dtype is np.bool_ else np.arange(6).reshape(2, 3)).astype(dtype)
    request = codec.encode_request("m", {"a": array}, raw=raw)
    decoded = codec.decode_inputs(request, sig)
    response = codec.encode_response(request, "1", decoded, ["a"])
    assert bool(response.raw_output_contents) is raw
    back = codec.decode_response(response)["a"]
    assert back.dtype == array.dtype and np.array_equal(back, array)


def _request(**changes) -> pb.ModelInferRequest:
    request = codec.encode_request("two", ARRAYS)
    for key, value in changes.items():
        key(request, value)
    return request


def _error(request) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as info:
        codec.decode_inputs(request, SIG)
    return info.value


def test_wrong_shape_names_the_input_and_the_expected_shape():
    request = codec.encode_request("two", {"x": np.zeros((2, 5), np.float32), "n": ARRAYS["n"]})
    err = _error(request)
    assert err.field == "inputs[x].shape" and "[2, 5] given" in err.rule and "[-1, 4]" in err.rule


def test_wrong_rank():
    err = _error(codec.encode_request("two", {"x": np.zeros((8,), np.float32), "n": ARRAYS["n"]}))
    assert err.field == "inputs[x].shape"


def test_wrong_dtype_names_the_input_and_the_expected_dtype():
    err = _error(codec.encode_request("two", {"x": ARRAYS["x"].astype(np.float64), "n": ARRAYS["n"]}))
    assert err.field == "inputs[x].datatype" and "FP64 given" in err.rule and "FP32" in err.rule


def test_missing_and_unknown_inputs():
    err = _error(codec.encode_request("two", {"x": ARRAYS["x"]}))
    assert err.field == "inputs" and "'n'" in err.rule
    err = _error(codec.encode_request("two", {**ARRAYS, "z": ARRAYS["x"]}))
    assert err.field == "inputs[2].name" and "unknown input 'z'" in err.rule


def test_byte_and_value_counts_are_checked():
    request = codec.encode_request("two", ARRAYS)
    request.raw_input_contents[0] = request.raw_input_contents[0][:-4]
    err = _error(request)
    assert "28 bytes given" in err.rule and "needs 32" in err.rule
    typed = codec.encode_request("two", ARRAYS, raw=False)
    typed.inputs[1].contents.int64_contents.append(9)
    assert "3 values given" in _error(typed).rule
    request = codec.encode_request("two", ARRAYS)
    request.raw_input_contents.pop()
    assert _error(request).field == "raw_input_contents"


def test_output_selection():
    request = codec.encode_request("two", ARRAYS)
    assert codec.requested_outputs(request, SIG) == ["y", "m"]
    request.outputs.add(name="m")
    assert codec.requested_outputs(request, SIG) == ["m"]
    request.outputs.add(name="nope")
    with pytest.raises(InvalidArgument, match="unknown output 'nope'"):
        codec.requested_outputs(request, SIG)
