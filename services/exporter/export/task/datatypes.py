"""Runs in: the export Ray task and the exporter process.

Tensor element types as the exporter's API has them: the DataType enum <-> v2 names.

The table itself (numpy and Paddle dtypes, wire fields) is common.v2_datatypes; this module
adds only the proto enum, whose values are the v2 types a Paddle model may declare. Imported
by the exporter and by the export task on the cluster, so it needs neither Paddle nor numpy
at import time.
"""

from __future__ import annotations

from typing import cast

from paddleray.exporter.v1 import model_pb2
from paddleray.services.common import v2_datatypes

# v2 name -> DataType enum: every enum value but UNSPECIFIED, named DATA_TYPE_<v2 name>.
_ENUMS: dict[str, model_pb2.DataType] = {
    name.removeprefix("DATA_TYPE_"): cast(model_pb2.DataType, value)
    for name, value in model_pb2.DataType.items() if name != "DATA_TYPE_UNSPECIFIED"
}
_BY_ENUM: dict[int, str] = {int(enum): name for name, enum in _ENUMS.items()}
V2_NAMES = tuple(_ENUMS)


def from_enum(value: int) -> str:
    """The v2 name of a DataType; KeyError for UNSPECIFIED or an unknown number."""
    return _BY_ENUM[value]


def to_enum(name: str) -> model_pb2.DataType:
    return _ENUMS[name]


def dtype_name(name: str) -> str:
    """Paddle dtype name ("float32", also numpy's for all but BF16) of a v2 name ("FP32")."""
    paddle = v2_datatypes.TABLE[name].paddle
    if paddle is None:
        raise ValueError(f"datatype {name} has no Paddle dtype")
    return paddle


def from_dtype(dtype: object) -> str:
    """v2 name of a numpy dtype, a Paddle dtype or a dtype name ("float32", paddle.float32), if
    the exporter's DataType has it; ValueError otherwise."""
    name = v2_datatypes.from_dtype(dtype)
    if name not in _ENUMS:
        raise ValueError(f"dtype {dtype} ({name}) is not a datatype a Paddle export may declare: one of {V2_NAMES}")
    return name
