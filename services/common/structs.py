"""google.protobuf.Struct <-> Python values, keeping the user's integers integers.

A Struct stores every number as a double, so `{"hidden_sizes": [128]}` comes back from
json_format as `[128.0]`: shown in tables as `128.0`, and handed to user code as a float that
`range()` or `paddle.nn.Linear` reject. The rule, applied wherever a Struct becomes Python (the
trainer's config for user code, the scheduler's trial parameters, the CLI's tables): a number
with no fractional part and a magnitude of at most 2**53 (where doubles still hold every
integer exactly) becomes an int; any other number stays a float. A user who writes `1.0`
therefore gets `1`, which Python accepts wherever a float is expected.
"""

from __future__ import annotations

import math
from typing import Any

from google.protobuf import json_format, struct_pb2

_EXACT_INTEGERS = 2**53


def integral(value: Any) -> Any:
    """The rule above, applied recursively to JSON-like data."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) <= _EXACT_INTEGERS:
        return int(value)
    if isinstance(value, dict):
        return {key: integral(item) for key, item in value.items()}
    if isinstance(value, list):
        return [integral(item) for item in value]
    return value


def to_python(message: struct_pb2.Struct | struct_pb2.Value | struct_pb2.ListValue) -> Any:
    """A Struct, Value or ListValue as Python data, integral numbers as ints."""
    return integral(json_format.MessageToDict(message))


def to_struct(data: dict[str, Any]) -> struct_pb2.Struct:
    return json_format.ParseDict(data, struct_pb2.Struct())
