"""The checks every service's fuzz tests share: hostile messages, wire garbage, oversized requests.

Each service's test module parametrizes these over its RPCs (from the service descriptor,
so an RPC added later is fuzzed without anyone listing it).
"""

from __future__ import annotations

import math
import os

import grpc
from google.protobuf import descriptor as d
from google.protobuf import message_factory
from hypothesis import settings
from hypothesis import strategies as st

from reliability.harness import Target, healthy, invoke
from reliability.strategies import mutations, requests, varint, wire_garbage

CI_EXAMPLES = 5
# An RPC whose request has no fields gets one example per kind: the others make up for it.
SOAK_REQUESTS_PER_SERVICE = 11_500
OVERSIZED_BYTES = 65 * 1024 * 1024  # the servers accept 64 MiB


def methods(*services: d.ServiceDescriptor) -> list[d.MethodDescriptor]:
    return [method for service in services for method in service.methods]


def examples(rpcs: int) -> settings:
    """Examples per (RPC, kind) test: a few in CI; in soak, enough that the service gets
    SOAK_REQUESTS_PER_SERVICE requests over its three kinds of test; PADDLERAY_FUZZ_EXAMPLES
    sets it by hand."""
    if os.environ.get("PADDLERAY_FUZZ_EXAMPLES"):
        return settings(max_examples=int(os.environ["PADDLERAY_FUZZ_EXAMPLES"]))
    if settings.get_current_profile_name() == "soak":
        return settings(max_examples=math.ceil(SOAK_REQUESTS_PER_SERVICE / (3 * rpcs)))
    return settings(max_examples=CI_EXAMPLES)


def send_message(target: Target, method: d.MethodDescriptor, data: st.DataObject) -> None:
    strategy = requests(method.input_type, target.names)
    if method.client_streaming:
        chunks = data.draw(st.lists(strategy, min_size=1, max_size=3))
        target.send(method, "message", [c.SerializeToString() for c in chunks], chunks)
    else:
        message = data.draw(strategy)
        target.send(method, "message", message.SerializeToString(), message)


def send_mutation(target: Target, method: d.MethodDescriptor, data: st.DataObject) -> None:
    base = target.bases.get(method.name) or message_factory.GetMessageClass(method.input_type)()
    strategy = mutations(base, target.names, target.frozen.get(method.name, frozenset()))
    if method.client_streaming:
        chunks = data.draw(st.lists(strategy, min_size=1, max_size=3))
        target.send(method, "mutation", [c.SerializeToString() for c in chunks], chunks)
    else:
        message = data.draw(strategy)
        target.send(method, "mutation", message.SerializeToString(), message)


def send_garbage(target: Target, method: d.MethodDescriptor, data: st.DataObject) -> None:
    payload = data.draw(wire_garbage(method.input_type))
    target.send(method, "garbage", payload, payload)


def send_oversized(target: Target, method: d.MethodDescriptor) -> grpc.StatusCode:
    """A request over the servers' message limit (a string in field 1): refused before decoding."""
    field = method.input_type.fields[0].number
    payload = varint(field << 3 | 2) + varint(OVERSIZED_BYTES) + b"a" * OVERSIZED_BYTES
    code = invoke(target.channel, method, payload)
    target.recorder.record(target.service, method.name, "oversized", code)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, code
    assert healthy(target.channel)
    return code
