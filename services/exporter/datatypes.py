"""Tensor element types: the v2 protocol's names, the proto enum, numpy and Paddle dtypes.

Imported by the exporter and by the export task on the cluster, so it needs neither Paddle
nor numpy at import time.
"""

from __future__ import annotations

from paddleray.exporter.v1 import model_pb2

# v2 datatype name -> (DataType enum, numpy / Paddle dtype name). BF16 has no numpy dtype:
# inputs of that type cannot be sampled or compared here.
_TYPES = {
    "BOOL": (model_pb2.DATA_TYPE_BOOL, "bool"),
    "INT8": (model_pb2.DATA_TYPE_INT8, "int8"),
    "INT16": (model_pb2.DATA_TYPE_INT16, "int16"),
    "INT32": (model_pb2.DATA_TYPE_INT32, "int32"),
    "INT64": (model_pb2.DATA_TYPE_INT64, "int64"),
    "UINT8": (model_pb2.DATA_TYPE_UINT8, "uint8"),
    "FP16": (model_pb2.DATA_TYPE_FP16, "float16"),
    "BF16": (model_pb2.DATA_TYPE_BF16, "bfloat16"),
    "FP32": (model_pb2.DATA_TYPE_FP32, "float32"),
    "FP64": (model_pb2.DATA_TYPE_FP64, "float64"),
}
_BY_ENUM: dict[int, str] = {int(enum): name for name, (enum, _) in _TYPES.items()}
_BY_DTYPE = {dtype: name for name, (_, dtype) in _TYPES.items()}
V2_NAMES = tuple(_TYPES)


def from_enum(value: int) -> str:
    """The v2 name of a DataType; KeyError for UNSPECIFIED or an unknown number."""
    return _BY_ENUM[value]


def to_enum(name: str) -> model_pb2.DataType:
    return _TYPES[name][0]


def dtype_name(name: str) -> str:
    """numpy / Paddle dtype name ("float32") of a v2 name ("FP32")."""
    return _TYPES[name][1]


def from_dtype(dtype: object) -> str:
    """v2 name of a numpy dtype, a Paddle dtype or a dtype name ("float32", paddle.float32)."""
    text = str(dtype).removeprefix("paddle.").removeprefix("torch.")
    if text not in _BY_DTYPE:
        raise ValueError(f"dtype {dtype} has no v2 datatype")
    return _BY_DTYPE[text]
