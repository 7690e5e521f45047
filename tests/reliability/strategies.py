"""Hypothesis strategies that build hostile requests from a message's descriptor.

`requests(descriptor, names)` fills any subset of a message's fields with values chosen to
break validation: huge and odd strings (`../`, NUL, resource names of the wrong kind or with
extra segments), NaN / infinities / extreme integers, enum numbers no one defined, Structs
nested past any sane depth, Durations and Timestamps out of their documented range. `names`
are resource names that exist, so that some requests reach deeper than the name check.

`wire_garbage(descriptor)` encodes bytes at the wire level: the message's own field numbers
with the wrong wire type, truncated lengths, unterminated groups, invalid UTF-8 in string
fields; plus plain random bytes. Sent with identity serializers, they test the server's
decoding, which no generated stub can reach.
"""

from __future__ import annotations

import math

from google.protobuf import descriptor as d
from google.protobuf import message_factory
from hypothesis import strategies as st

F = d.FieldDescriptor

# Sized to cross limits (the 64 KiB-1 MiB range where field limits sit) without making one
# example take seconds; messages larger than the server accepts have a test of their own.
HUGE_LENGTHS = (1_000, 5_000, 70_000, 1_100_000)
ODD_NAMES = (
    "", " ", "/", "//", "..", "../", "../../etc/passwd", "jobs/", "jobs/..", "jobs/../../x", "jobs//x",
    "jobs/x/y", "jobs/%2e%2e", "jobs/\x00", "\x00", "jobs/ x", "experiments/", "runs/", "models/",
    "models/x/versions/", "models/x/versions/-1", "models/x/versions/99999999999999999999",
    "models/x/versions/0", "models/x/versions/1.5", "deployments/", "packages/", "packages/sha256:",
    "packages/sha256:../../x", "JOBS/x", "jobs/x\n", "jobs/\u202e", "jobs/\U0001f600", "*", "-1", "NaN",
)
INT_LIMITS = {
    F.CPPTYPE_INT32: (-(2**31), 2**31 - 1),
    F.CPPTYPE_INT64: (-(2**63), 2**63 - 1),
    F.CPPTYPE_UINT32: (0, 2**32 - 1),
    F.CPPTYPE_UINT64: (0, 2**64 - 1),
}
# Duration and Timestamp may hold any int64 on the wire; their documented range is far smaller.
WELL_KNOWN_RANGE = {"seconds": (-(2**63), 2**63 - 1), "nanos": (-(2**31), 2**31 - 1)}
MAX_DEPTH = 4


def huge_strings() -> st.SearchStrategy[str]:
    return st.builds(lambda n, c: c * n, st.sampled_from(HUGE_LENGTHS), st.sampled_from("a/.é\x00"))


def strings(names: tuple[str, ...], depth: int = 0) -> st.SearchStrategy[str]:
    variants = [st.text(max_size=24), st.sampled_from(ODD_NAMES)]
    if depth <= 1:
        variants.append(huge_strings())
    if names:
        known = st.sampled_from(names)
        variants += [known, known, st.builds(lambda n, s: n + s, known, st.sampled_from(ODD_NAMES + ("x",)))]
    return st.one_of(variants)


def integers(cpp_type: int) -> st.SearchStrategy[int]:
    low, high = INT_LIMITS[cpp_type]
    edges = [v for v in (low, high, 0, 1, -1, 2, 100, 2**31 - 1, 2**53 + 1) if low <= v <= high]
    return st.one_of(st.sampled_from(edges), st.integers(low, high), st.integers(max(low, -3), 1000))


def floats(width: int) -> st.SearchStrategy[float]:
    edges = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e308, -1e308, 1.8e305, 5e-324, 2.0**63, 0.5, 1.0]
    if width == 32:
        edges = [e for e in edges if not math.isfinite(e) or abs(e) < 3.4e38]
    return st.one_of(st.sampled_from(edges), st.floats(width=width), st.floats(-10, 100, width=width))


def enums(field: d.FieldDescriptor) -> st.SearchStrategy[int]:
    defined = [v.number for v in field.enum_type.values]
    return st.one_of(st.sampled_from(defined), st.sampled_from([-1, max(defined) + 1, 2**31 - 1, -(2**31)]),
                     st.integers(-(2**31), 2**31 - 1))


def struct_values(depth: int) -> st.SearchStrategy:
    leaves = st.one_of(st.none(), st.booleans(), floats(64), st.text(max_size=16))
    if depth <= 0:
        return leaves
    inner = struct_values(depth - 1)
    return st.one_of(leaves, st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3))


def nested(depth: int, leaf) -> object:
    value = leaf
    for level in range(depth):
        value = {"k": value} if level % 2 == 0 else [value]
    return value


def structs(depth: int) -> st.SearchStrategy[dict]:
    """Plain Structs, and ones nested 30-120 levels deep (Python's protobuf refuses to parse
    past 100; issue 13 found 45 levels breaking the scheduler)."""
    deep = st.builds(lambda n, leaf: {"deep": nested(n, leaf)}, st.integers(30, 120), struct_values(0))
    wide = st.builds(lambda n: {f"k{i}": i for i in range(n)}, st.sampled_from([1_000, 20_000]))
    big = st.builds(lambda text: {"text": text}, huge_strings())
    plain = st.dictionaries(st.text(max_size=12), struct_values(2), max_size=5)
    return st.one_of(plain, deep, wide, big) if depth <= 1 else st.one_of(plain, deep)


def field_values(field: d.FieldDescriptor, names: tuple[str, ...], depth: int) -> st.SearchStrategy:
    cpp = field.cpp_type
    if cpp == F.CPPTYPE_STRING:
        return st.binary(max_size=64) if field.type == F.TYPE_BYTES else strings(names, depth)
    if cpp in INT_LIMITS:
        return integers(cpp)
    if cpp == F.CPPTYPE_DOUBLE:
        return floats(64)
    if cpp == F.CPPTYPE_FLOAT:
        return floats(32)
    if cpp == F.CPPTYPE_BOOL:
        return st.booleans()
    if cpp == F.CPPTYPE_ENUM:
        return enums(field)
    return requests(field.message_type, names, depth + 1)


def _assign(message, field: d.FieldDescriptor, value) -> None:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        target = getattr(message, field.name)
        value_field = field.message_type.fields_by_name["value"]
        for key, item in value.items():
            if value_field.message_type is not None:
                target[key].CopyFrom(item)
            else:
                target[key] = item
    elif field.is_repeated:
        target = getattr(message, field.name)
        if field.message_type is not None:
            for item in value:
                target.add().CopyFrom(item)
        else:
            target.extend(value)
    elif field.message_type is not None:
        getattr(message, field.name).CopyFrom(value)
    else:
        setattr(message, field.name, value)


def _field_strategy(field: d.FieldDescriptor, names: tuple[str, ...], depth: int) -> st.SearchStrategy:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key = field_values(field.message_type.fields_by_name["key"], (), depth)
        value = field_values(field.message_type.fields_by_name["value"], names, depth)
        return st.one_of(st.dictionaries(key, value, max_size=3),
                         st.builds(lambda n: {f"k{i}": None for i in range(n)}, st.just(0)))
    item = field_values(field, names, depth)
    if field.is_repeated:
        # Many small items (a huge item repeated would only measure this process's memory).
        small = (st.just(message_factory.GetMessageClass(field.message_type)()) if field.message_type is not None
                 else field_values(field, (), MAX_DEPTH).filter(lambda v: not isinstance(v, str | bytes) or len(v) < 64))
        many = st.builds(lambda v, n: [v] * n, small, st.sampled_from([100, 5_000]))
        return st.one_of(st.lists(item, max_size=3), many)
    return item


def _well_known(descriptor: d.Descriptor, depth: int):
    cls = message_factory.GetMessageClass(descriptor)
    if descriptor.full_name == "google.protobuf.Struct":
        def build_struct(value: dict):
            message = cls()
            message.update(value)
            return message
        return st.builds(build_struct, structs(depth))
    if descriptor.full_name in ("google.protobuf.Duration", "google.protobuf.Timestamp"):
        seconds = st.one_of(st.sampled_from([0, 1, -1, 2**63 - 1, -(2**63), 315_576_000_001, 253_402_300_800]),
                            st.integers(*WELL_KNOWN_RANGE["seconds"]))
        nanos = st.one_of(st.sampled_from([0, 999_999_999, 10**9, -1]), st.integers(*WELL_KNOWN_RANGE["nanos"]))
        return st.builds(lambda s, n: cls(seconds=s, nanos=n), seconds, nanos)
    if descriptor.full_name == "google.protobuf.FieldMask":
        path = st.one_of(st.sampled_from(["*", "", "name", "labels", "display_name", "spec.config", "a.b.c",
                                          "state", "../x", "labels.x"]), st.text(max_size=12))
        return st.builds(lambda paths: cls(paths=paths), st.lists(path, max_size=4))
    return None


@st.composite
def _fill(draw, descriptor: d.Descriptor, names: tuple[str, ...], depth: int):
    message = message_factory.GetMessageClass(descriptor)()
    fields = [f for f in descriptor.fields if depth < MAX_DEPTH or f.message_type is None]
    if not fields:
        return message
    chosen = draw(st.lists(st.sampled_from(fields), unique_by=lambda f: f.number, max_size=len(fields)))
    for field in chosen:
        _assign(message, field, draw(_field_strategy(field, names, depth)))
    return message


def requests(descriptor: d.Descriptor, names: tuple[str, ...] = (), depth: int = 0) -> st.SearchStrategy:
    """Messages of `descriptor` with a hostile value in any subset of its fields."""
    special = _well_known(descriptor, depth)
    return special if special is not None else _fill(descriptor, names, depth)


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _record(number: int, wire_type: int, payload: bytes, truncate: bool) -> bytes:
    key = varint((number << 3) | wire_type)
    if wire_type == 0:
        return key + (payload[:1] + b"\xff" * 10 if truncate else varint(int.from_bytes(payload[:8] or b"\0", "little")))
    if wire_type == 1:
        return key + payload[: 7 if truncate else 8].ljust(7 if truncate else 8, b"\0")
    if wire_type == 2:
        length = len(payload) + (1_000 if truncate else 0)
        return key + varint(length) + payload
    if wire_type == 5:
        return key + payload[: 3 if truncate else 4].ljust(3 if truncate else 4, b"\0")
    return key + payload  # groups (3, 4): a start without an end, an end without a start


INVALID_UTF8 = (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"abc\x80")


def wire_garbage(descriptor: d.Descriptor) -> st.SearchStrategy[bytes]:
    numbers = [f.number for f in descriptor.fields] or [1]
    string_numbers = [f.number for f in descriptor.fields if f.type == F.TYPE_STRING] or [1]
    record = st.builds(_record, st.one_of(st.sampled_from(numbers), st.integers(1, 2**29 - 1)),
                       st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7]), st.binary(max_size=16), st.booleans())
    bad_text = st.builds(lambda n, b: _record(n, 2, b, False), st.sampled_from(string_numbers),
                         st.sampled_from(INVALID_UTF8))
    records = st.lists(st.one_of(record, bad_text), min_size=1, max_size=4).map(b"".join)
    return st.one_of(records, st.binary(min_size=1, max_size=256), st.sampled_from([b"\x00", b"\xff" * 64, b"\x0a"]))


@st.composite
def mutations(draw, base, names: tuple[str, ...] = (), frozen: frozenset[str] = frozenset()):
    """`base` (a valid request) with one field, at any depth, set to a hostile value: each
    rule of the validation is then reached on its own, past the checks the base passes."""
    message = type(base)()
    message.CopyFrom(base)
    target, depth = message, 0
    while True:
        fields = [f for f in target.DESCRIPTOR.fields if f.name not in frozen or depth]
        if not fields:
            return message
        field = draw(st.sampled_from(fields))
        leaf = (field.message_type is None or field.is_repeated or depth >= MAX_DEPTH
                or _well_known(field.message_type, depth) is not None or draw(st.booleans()))
        if leaf:
            target.ClearField(field.name)
            _assign(target, field, draw(_field_strategy(field, names, depth)))
            return message
        target, depth = getattr(target, field.name), depth + 1
