"""The Open Inference Protocol v2's tensor datatypes: the one table every service reads.

The exporter (export spec, manifest, proto enum), the serving codec and predictors, and the
client CLI each used to keep a table of their own, and they disagreed: the manifest allowed
BF16, which the codec could not decode (a BF16 model loaded, then failed every request), and
UINT16-UINT64 were decodable but refused in a manifest. Here each datatype says what it is in
numpy, in Paddle and on the wire; every other table is derived from this one
(tests/unit/common/test_v2_datatypes.py checks that they are).

Imports nothing but the standard library: serving's predictors run in KServe's virtual env in
the benchmark, and the export task on the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DataType:
    name: str
    # numpy dtype name; None where numpy has none (BF16): such a tensor cannot be decoded,
    # sampled or compared in numpy, so it is not servable.
    numpy: str | None
    # Paddle dtype name (paddle.static.InputSpec takes it); None where Paddle has none.
    paddle: str | None
    # The InferTensorContents field holding its values; None: raw bytes only (FP16, BF16).
    contents: str | None


TABLE: dict[str, DataType] = {t.name: t for t in (
    DataType("BOOL", "bool", "bool", "bool_contents"),
    DataType("INT8", "int8", "int8", "int_contents"),
    DataType("INT16", "int16", "int16", "int_contents"),
    DataType("INT32", "int32", "int32", "int_contents"),
    DataType("INT64", "int64", "int64", "int64_contents"),
    DataType("UINT8", "uint8", "uint8", "uint_contents"),
    # Paddle has no unsigned types wider than 8 bits (its uint16 holds bfloat16's bits).
    DataType("UINT16", "uint16", None, "uint_contents"),
    DataType("UINT32", "uint32", None, "uint_contents"),
    DataType("UINT64", "uint64", None, "uint64_contents"),
    DataType("FP16", "float16", "float16", None),
    DataType("BF16", None, "bfloat16", None),
    DataType("FP32", "float32", "float32", "fp32_contents"),
    DataType("FP64", "float64", "float64", "fp64_contents"),
)}

# Decodable and encodable as numpy arrays: what a served model's signature may use.
SERVABLE = tuple(name for name, t in TABLE.items() if t.numpy is not None)
# A Paddle model may take or give these: what an export may declare.
PADDLE = tuple(name for name, t in TABLE.items() if t.paddle is not None)
# name -> numpy dtype name, for the servable ones.
NUMPY = {name: t.numpy for name, t in TABLE.items() if t.numpy is not None}
# name -> InferTensorContents field, for those that travel as typed contents.
CONTENTS_FIELD = {name: t.contents for name, t in TABLE.items() if t.contents is not None}
_BY_DTYPE = {dtype: t.name for t in TABLE.values() for dtype in {t.numpy, t.paddle} - {None}}


def from_dtype(dtype: object) -> str:
    """v2 name of a numpy or Paddle dtype (or scalar type), or of a dtype name ("float32", paddle.float32);
    ValueError when it has none. Paddle's "uint16" is read as numpy's (UINT16)."""
    text = (dtype.__name__ if isinstance(dtype, type) else str(dtype)).removeprefix("paddle.").removeprefix("torch.")
    if text not in _BY_DTYPE:
        raise ValueError(f"dtype {dtype} has no v2 datatype")
    return _BY_DTYPE[text]
