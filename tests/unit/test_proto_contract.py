"""Every RPC of the paddleray services states its errors in its proto comment, the contract
reader the fuzz tests check answers against (support.proto_contract) reads them as written, and
buf breaking covers every package.

The fuzz tests (tests/reliability) then fail on any code a service answers that its RPC's
contract does not list: StartRun once answered ALREADY_EXISTS and GetRunLogs INVALID_ARGUMENT,
and neither said so.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from paddleray.exporter.v1 import exporter_service_pb2
from paddleray.scheduler.v1 import experiment_service_pb2, job_service_pb2, package_service_pb2
from paddleray.trainer.v1 import trainer_service_pb2
from support.proto_contract import CLIENT_SIDE, PROTOS, contracts, documented_codes, parse

pytestmark = pytest.mark.unit

SERVICES = [
    job_service_pb2.DESCRIPTOR.services_by_name["JobService"],
    experiment_service_pb2.DESCRIPTOR.services_by_name["ExperimentService"],
    package_service_pb2.DESCRIPTOR.services_by_name["PackageService"],
    trainer_service_pb2.DESCRIPTOR.services_by_name["TrainerService"],
    exporter_service_pb2.DESCRIPTOR.services_by_name["ExporterService"],
]
EVERY_RPC = {"INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "UNAUTHENTICATED", "UNAVAILABLE"}


def test_every_rpc_of_every_service_has_a_contract_and_states_its_own_errors():
    assert {s.full_name for s in SERVICES} == set(contracts())
    for service in SERVICES:
        contract = contracts()[service.full_name]
        assert set(contract.rpcs) == {m.name for m in service.methods}, service.full_name
        # What any RPC may answer (an undecodable or oversized message, no token, a dependency
        # away) is said once, in the service's comment.
        assert EVERY_RPC <= contract.codes(service.methods[0].name), service.full_name
        for method in service.methods:
            assert "Errors:" in contract.rpcs[method.name], (
                f"{service.name}.{method.name} states no errors of its own")


def test_an_rpc_may_answer_what_it_and_its_service_name_and_nothing_else():
    trainer = "paddleray.trainer.v1.TrainerService"
    assert {"ALREADY_EXISTS", "PERMISSION_DENIED", "FAILED_PRECONDITION"} <= documented_codes(trainer, "StartRun")
    assert "ALREADY_EXISTS" not in documented_codes(trainer, "GetRun")
    assert CLIENT_SIDE <= documented_codes(trainer, "GetRun")


def test_the_reader_takes_service_and_rpc_comments_apart():
    text = """
syntax = "proto3";
// Things. Errors of every RPC: UNAVAILABLE.
service ThingService {
  // Gets one. Errors: NOT_FOUND.
  rpc GetThing(GetThingRequest) returns (GetThingResponse);
  rpc ListThings(ListThingsRequest) returns (ListThingsResponse);
}
// A message that mentions ABORTED outside any service.
message GetThingRequest {}
"""
    [(name, contract)] = parse(text).items()
    assert name == "ThingService"
    assert contract.codes("GetThing") == {"UNAVAILABLE", "NOT_FOUND"}
    assert contract.codes("ListThings") == {"UNAVAILABLE"}


@pytest.mark.parametrize("package", ["common", "scheduler", "trainer", "exporter"])
def test_buf_breaking_catches_a_field_removed_from_any_package(tmp_path, package):
    """`make lint` runs buf breaking against main; no package is left out of it (exporter v1 was)."""
    buf = Path(sys.executable).parent / "buf"
    before, after = tmp_path / "before", tmp_path / "after"
    shutil.copytree(PROTOS, before)
    shutil.copytree(PROTOS, after)
    proto = sorted((after / "paddleray" / package / "v1").glob("*.proto"))[0]
    text = proto.read_text()
    field = re.search(r"^  (?!rpc |option |reserved )[\w.]+ \w+ = \d+;\n", text, re.M)
    assert field is not None, proto
    proto.write_text(text.replace(field.group(0), "", 1))
    unchanged = subprocess.run([buf, "breaking", "--against", str(before)], cwd=before, capture_output=True, text=True)
    assert unchanged.returncode == 0, unchanged.stdout + unchanged.stderr
    removed = subprocess.run([buf, "breaking", "--against", str(before)], cwd=after, capture_output=True, text=True)
    assert removed.returncode != 0 and "deleted" in removed.stdout + removed.stderr, removed.stdout + removed.stderr
