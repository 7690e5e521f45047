"""request_id's rule (common/idempotency.py): the fingerprint, the comparison, and which RPCs
follow it."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import paddleray
from paddleray.common.v1 import common_pb2
from paddleray.services.common import errors, idempotency
from paddleray.trainer.v1 import trainer_service_pb2

pytestmark = pytest.mark.unit

# The creates that take a request_id, each storing and comparing the fingerprint (their tests:
# tests/unit/scheduler/test_jobs_store.py, tests/integration/scheduler/test_experiments_domain.py,
# tests/integration/exporter/test_export.py, tests/unit/exporter/test_deployments.py,
# tests/unit/trainer/test_start_run.py).
RULED = {"JobService.CreateJob", "ExperimentService.CreateExperiment", "ExporterService.ExportModel",
         "ExporterService.CreateDeployment", "TrainerService.StartRun"}


def test_every_rpc_that_takes_a_request_id_is_one_the_rule_covers():
    found = set()
    for module in pkgutil.walk_packages(paddleray.__path__, "paddleray."):
        if not module.name.endswith("_service_pb2"):
            continue
        for service in importlib.import_module(module.name).DESCRIPTOR.services_by_name.values():
            found |= {f"{service.name}.{m.name}" for m in service.methods if "request_id" in m.input_type.fields_by_name}
    assert found == RULED


def test_the_fingerprint_is_deterministic_and_tells_requests_apart():
    one = common_pb2.TrainingSpec(entrypoint="pkg.mod:main")
    one.config.update({"b": 1, "a": [1, 2], "c": {"y": 1, "x": 2}})
    other = common_pb2.TrainingSpec(entrypoint="pkg.mod:main")
    other.config.update({"c": {"x": 2, "y": 1}, "a": [1, 2], "b": 1})  # the same map, built in another order
    assert idempotency.fingerprint(one) == idempotency.fingerprint(other)
    other.config["b"] = 2
    assert idempotency.fingerprint(one) != idempotency.fingerprint(other)
    # Parts are length-prefixed: moving a boundary changes the fingerprint.
    assert idempotency.fingerprint("ab", "c") != idempotency.fingerprint("a", "bc")


def test_of_request_leaves_out_the_request_id_and_the_fields_a_retry_recomputes():
    first = trainer_service_pb2.StartRunRequest(run_id="r", request_id="a", tenant="")
    first.timeout.seconds = 60
    retry = trainer_service_pb2.StartRunRequest(run_id="r", request_id="b", tenant="team-a")
    retry.timeout.seconds = 42
    assert idempotency.of_request(first, ignore=("timeout",), tenant="team-a") == idempotency.of_request(
        retry, ignore=("timeout",), tenant="team-a")
    assert first.request_id == "a" and first.timeout.seconds == 60  # the request itself is left as it was
    assert idempotency.of_request(first, tenant="team-a") != idempotency.of_request(retry, tenant="team-a")


def test_a_repeat_passes_another_request_is_already_exists_naming_request_id():
    idempotency.check_repeat("f1", "f1")
    idempotency.check_repeat("", "f2")  # stored before fingerprints: any repeat gets the first resource
    with pytest.raises(errors.AlreadyExists, match="^request_id: already used by a different request"):
        idempotency.check_repeat("f1", "f2")
