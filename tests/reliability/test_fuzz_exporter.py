"""Fuzzing every RPC of the exporter (ExporterService) over gRPC."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paddleray.exporter.v1 import exporter_service_pb2
from reliability.fuzzing import examples, methods, send_garbage, send_message, send_mutation, send_oversized
from reliability.harness import healthy

RPCS = methods(exporter_service_pb2.DESCRIPTOR.services_by_name["ExporterService"])
pytestmark = pytest.mark.parametrize("method", RPCS, ids=lambda m: m.name)


@examples(len(RPCS))
@given(data=st.data())
def test_hostile_messages(exporter_target, method, data):
    send_message(exporter_target, method, data)


@examples(len(RPCS))
@given(data=st.data())
def test_one_field_of_a_valid_request(exporter_target, method, data):
    send_mutation(exporter_target, method, data)


@examples(len(RPCS))
@given(data=st.data())
def test_wire_garbage(exporter_target, method, data):
    send_garbage(exporter_target, method, data)


def test_oversized_request_and_still_serving(exporter_target, method):
    if method.name == "ExportModel":
        send_oversized(exporter_target, method)
    assert healthy(exporter_target.channel)
