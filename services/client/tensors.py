"""Arrays for the Open Inference Protocol v2: its datatype names, inputs read from .npy / .json
files or inline JSON, and conversion to a model's declared input types."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from paddleray.services.client.errors import ConfigError
from paddleray.services.common import v2_datatypes

# v2 datatype names <-> numpy dtypes (BYTES has no fixed dtype), and the typed-contents field of
# each, for responses that do not use raw_output_contents: the services' one table.
V2_DTYPES: dict[str, np.dtype] = {name: np.dtype(dtype) for name, dtype in v2_datatypes.NUMPY.items()}
CONTENTS_FIELD = v2_datatypes.CONTENTS_FIELD


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
