"""Fuzzing every RPC of the trainer (TrainerService) over gRPC."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paddleray.trainer.v1 import trainer_service_pb2
from reliability.fuzzing import examples, methods, send_garbage, send_message, send_mutation, send_oversized
from reliability.harness import healthy

RPCS = methods(trainer_service_pb2.DESCRIPTOR.services_by_name["TrainerService"])
pytestmark = pytest.mark.parametrize("method", RPCS, ids=lambda m: m.name)


@examples(len(RPCS))
@given(data=st.data())
def test_hostile_messages(trainer_target, method, data):
    send_message(trainer_target, method, data)


@examples(len(RPCS))
@given(data=st.data())
def test_one_field_of_a_valid_request(trainer_target, method, data):
    send_mutation(trainer_target, method, data)


@examples(len(RPCS))
@given(data=st.data())
def test_wire_garbage(trainer_target, method, data):
    send_garbage(trainer_target, method, data)


def test_oversized_request_and_still_serving(trainer_target, method):
    if method.name == "StartRun":
        send_oversized(trainer_target, method)
    assert healthy(trainer_target.channel)
