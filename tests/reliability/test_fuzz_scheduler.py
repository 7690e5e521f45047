"""Fuzzing every RPC of the scheduler (JobService, ExperimentService, PackageService) over gRPC."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paddleray.scheduler.v1 import experiment_service_pb2, job_service_pb2, package_service_pb2
from reliability.fuzzing import examples, methods, send_garbage, send_message, send_mutation, send_oversized
from reliability.harness import healthy

RPCS = methods(job_service_pb2.DESCRIPTOR.services_by_name["JobService"],
               experiment_service_pb2.DESCRIPTOR.services_by_name["ExperimentService"],
               package_service_pb2.DESCRIPTOR.services_by_name["PackageService"])
pytestmark = pytest.mark.parametrize("method", RPCS, ids=lambda m: m.name)


@examples(len(RPCS))
@given(data=st.data())
def test_hostile_messages(scheduler_target, method, data):
    send_message(scheduler_target, method, data)


@examples(len(RPCS))
@given(data=st.data())
def test_one_field_of_a_valid_request(scheduler_target, method, data):
    send_mutation(scheduler_target, method, data)


@examples(len(RPCS))
@given(data=st.data())
def test_wire_garbage(scheduler_target, method, data):
    send_garbage(scheduler_target, method, data)


def test_oversized_request_and_still_serving(scheduler_target, method):
    if method.name in ("CreateJob", "UploadPackage"):
        send_oversized(scheduler_target, method)
    assert healthy(scheduler_target.channel)
