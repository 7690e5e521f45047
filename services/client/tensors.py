"""Arrays for the Open Inference Protocol v2: its datatype names, inputs read from .npy / .json
files or inline JSON, and conversion to a model's declared input types."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from paddleray.services.client.errors import ConfigError

# v2 datatype names <-> numpy dtypes (the protocol's tensor data types; BYTES has no fixed dtype).
V2_DTYPES: dict[str, np.dtype] = {
    name: np.dtype(kind) for name, kind in {
        "BOOL": np.bool_, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
        "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
        "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
    }.items()
}
# Typed-contents field of each datatype, for responses that do not use raw_output_contents.
CONTENTS_FIELD = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
    "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents", "UINT32": "uint_contents",
    "UINT64": "uint64_contents", "FP32": "fp32_contents", "FP64": "fp64_contents",
}


def v2_datatype(array: np.ndarray, name: str = "") -> str:
    dtype = array.dtype.newbyteorder("=")
    for datatype, candidate in V2_DTYPES.items():
        if candidate == dtype:
            return datatype
    raise ConfigError(f"input {name!r}: dtype {array.dtype} has no v2 datatype")


def parse_input(text: str) -> tuple[str, np.ndarray]:
    """`NAME=@file.npy`, `NAME=@file.json`, `NAME=<inline JSON>`, or the same without `NAME=`
    (the name is then "" and the model's only input is meant): the name and the array."""
    name, sep, value = text.partition("=")
    if not sep or name.startswith("@") or name.lstrip().startswith(("[", "{")) or not name.strip():
        name, value = "", text
    return name.strip(), load_array(value, name or "input")


def load_array(value: str, where: str = "input") -> np.ndarray:
    """An array from `@path` (.npy, or a JSON file of nested lists) or inline JSON."""
    if value.startswith("@"):
        path = Path(value[1:]).expanduser()
        if path.suffix == ".npy":
            try:
                loaded = np.load(path, allow_pickle=False)
            except OSError as error:
                raise ConfigError(f"{where}: cannot read {path}: {error.strerror or error}") from None
            except ValueError as error:
                raise ConfigError(f"{where}: {path} is not a .npy array ({error})") from None
            if not isinstance(loaded, np.ndarray):
                raise ConfigError(f"{where}: {path} is not a .npy array")
            return loaded
        try:
            text = path.read_text()
        except OSError as error:
            raise ConfigError(f"{where}: cannot read {path}: {error.strerror or error}") from None
        return _from_json(text, f"{where}: {path}")
    return _from_json(value, where)


def _from_json(text: str, where: str) -> np.ndarray:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{where}: not valid JSON: {error.msg} at line {error.lineno} column {error.colno}") from None
    try:
        array = np.asarray(data)
    except ValueError as error:  # ragged nesting
        raise ConfigError(f"{where}: not a rectangular array of numbers ({error})") from None
    if array.dtype.kind not in "biuf":
        raise ConfigError(f"{where}: expected numbers or booleans in nested lists, got {array.dtype.kind!r} values")
    return array


def conform(array: np.ndarray, datatype: str, where: str) -> np.ndarray:
    """The array as the model's declared datatype: numbers from JSON come as int64 / float64,
    and a model's input is usually FP32. Bools and ints become floats, floats narrower floats,
    ints narrower ints when every value fits; a float never silently becomes an int (the server
    then refuses the datatype by name)."""
    target = V2_DTYPES.get(datatype)
    if target is None or array.dtype == target:
        return array
    source = array.dtype.kind
    if source == "b" or (source in "iu" and target.kind == "f") or (source == "f" and target.kind == "f"):
        return array.astype(target)
    if source in "iu" and target.kind in "iu":
        info = np.iinfo(target)
        if array.size == 0 or (info.min <= int(array.min()) and int(array.max()) <= info.max):
            return array.astype(target)
    raise ConfigError(f"{where}: {array.dtype} values do not convert to the model's {datatype}")
