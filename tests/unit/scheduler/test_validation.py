"""Every CreateJob rule: a job breaking it is rejected with InvalidArgument naming the field."""

from __future__ import annotations

import pytest
from google.protobuf import duration_pb2

from paddleray.common.v1 import common_pb2
from paddleray.services.common import training_spec
from paddleray.services.common.errors import InvalidArgument
from paddleray.services.common.resources import job_demand
from paddleray.services.scheduler.validation import validate_create, validate_job
from support.scheduler import make_job

pytestmark = pytest.mark.unit
SPEC = "job.spec"
RES = "job.spec.resources_per_worker"


def _set(path: str, value):
    def change(job):
        *parents, leaf = path.split(".")
        target = job
        for part in parents:
            target = getattr(target, part)
        setattr(target, leaf, value)
    return change


def _call(method: str, *args):
    return lambda job: getattr(job, method)(*args)


CASES = [
    ("negative cpus", _set("spec.resources_per_worker.num_cpus", -1.0), f"{RES}.num_cpus", ">= 0"),
    ("NaN cpus", _set("spec.resources_per_worker.num_cpus", float("nan")), f"{RES}.num_cpus", "finite"),
    ("infinite gpus", _set("spec.resources_per_worker.num_gpus", float("inf")), f"{RES}.num_gpus", "finite"),
    ("negative gpus", _set("spec.resources_per_worker.num_gpus", -0.5), f"{RES}.num_gpus", ">= 0"),
    ("fractional gpus above 1", _set("spec.resources_per_worker.num_gpus", 1.5), f"{RES}.num_gpus", "below 1"),
    ("too fine a fraction", _set("spec.resources_per_worker.num_gpus", 0.0001), f"{RES}.num_gpus", "decimal"),
    ("negative memory", _set("spec.resources_per_worker.memory_bytes", -1), f"{RES}.memory_bytes", ">= 0"),
    ("NaN custom resource", lambda j: j.spec.resources_per_worker.custom.update({"tpu": float("nan")}),
     f"{RES}.custom['tpu']", "finite"),
    ("empty entrypoint", _set("spec.entrypoint", ""), f"{SPEC}.entrypoint", "required"),
    ("entrypoint without function", _set("spec.entrypoint", "pkg.module"), f"{SPEC}.entrypoint", "form"),
    ("entrypoint with a path", _set("spec.entrypoint", "pkg/mod.py:main"), f"{SPEC}.entrypoint", "form"),
    ("entrypoint with code", _set("spec.entrypoint", "os:system('x')"), f"{SPEC}.entrypoint", "form"),
    ("malformed image", _set("spec.runtime_env.image", "Not An Image!"), f"{SPEC}.runtime_env.image", "image"),
    ("bad env var name", lambda j: j.spec.runtime_env.env_vars.update({"1BAD": "x"}),
     f"{SPEC}.runtime_env.env_vars['1BAD']", "names"),
    ("negative workers", _set("spec.num_workers", -2), f"{SPEC}.num_workers", "1.."),
    # Explicit presence: an explicit 0 is refused, not read as "unset, so 1".
    ("zero workers", _set("spec.num_workers", 0), f"{SPEC}.num_workers", "1..1024 (leave it unset for 1)"),
    ("zero cpus", _set("spec.resources_per_worker.num_cpus", 0.0), f"{RES}.num_cpus", "> 0 (leave it unset for 1)"),
    ("unknown placement", _set("spec.placement_strategy", 42), f"{SPEC}.placement_strategy", "unknown"),
    ("negative keep_last", _set("spec.checkpoint_policy.keep_last", -1), f"{SPEC}.checkpoint_policy.keep_last", ">= 0"),
    ("duplicate dataset", lambda j: j.spec.datasets.extend([common_pb2.Dataset(name="d", uri="a"),
                                                            common_pb2.Dataset(name="d", uri="b")]),
     f"{SPEC}.datasets[1].name", "unique"),
    ("oversized config", lambda j: j.spec.config.update({"blob": "x" * (1024 * 1024 + 1)}), f"{SPEC}.config", "1 MiB"),
    ("priority too high", _set("priority", 1001), "job.priority", "-1000..1000"),
    ("priority too low", _set("priority", -1001), "job.priority", "-1000..1000"),
    ("bad tenant", _set("tenant", "Team A"), "job.tenant", "[a-z0-9-]"),
    ("label key with space", lambda j: j.labels.update({"bad key": "v"}), "job.labels['bad key']", "key name"),
    ("label value too long", lambda j: j.labels.update({"k": "v" * 64}), "job.labels['k']", "value"),
    ("label key bad prefix", lambda j: j.labels.update({"Bad_Prefix/k": "v"}), "job.labels['Bad_Prefix/k']", "prefix"),
    ("too many labels", lambda j: j.labels.update({f"k{i}": "v" for i in range(65)}), "job.labels", "at most 64"),
    ("too many retries", _set("retry_policy.max_retries", 101), "job.retry_policy.max_retries", "0..100"),
    ("negative retries", _set("retry_policy.max_retries", -1), "job.retry_policy.max_retries", "0..100"),
    ("backoff multiplier below 1", _set("retry_policy.backoff_multiplier", 0.5),
     "job.retry_policy.backoff_multiplier", ">= 1.0"),
    ("max below initial backoff", lambda j: j.retry_policy.max_backoff.CopyFrom(duration_pb2.Duration(nanos=1000)),
     "job.retry_policy.max_backoff", ">= initial_backoff"),
    ("zero timeout", lambda j: j.timeout.CopyFrom(duration_pb2.Duration(seconds=0)), "job.timeout", "positive"),
    ("timeout over 30 days", lambda j: j.timeout.CopyFrom(duration_pb2.Duration(seconds=31 * 86400)),
     "job.timeout", "30 days"),
    ("malformed duration", lambda j: j.timeout.CopyFrom(duration_pb2.Duration(seconds=5, nanos=-3)),
     "job.timeout", "malformed"),
    ("display name too long", _set("display_name", "x" * 257), "job.display_name", "256"),
    ("missing spec", lambda j: j.ClearField("spec"), "job.spec", "required"),
]


@pytest.mark.parametrize(("change", "field", "rule"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_rule_names_its_field(change, field, rule):
    job = make_job()
    change(job)
    with pytest.raises(InvalidArgument) as error:
        validate_create(job, "", "")
    assert error.value.field == field
    assert rule in error.value.rule


def test_unset_workers_and_cpus_are_one_each():
    job = make_job()
    job.spec.ClearField("num_workers")
    job.spec.resources_per_worker.ClearField("num_cpus")
    validate_create(job, "", "")
    assert training_spec.cpus(job.spec.resources_per_worker) == 1.0
    assert job_demand(job.spec).cpu_m == 1000  # admitted as the trainer reserves it, not as 0 CPUs


def test_fractional_gpus_with_several_workers_are_rejected():
    with pytest.raises(InvalidArgument) as error:
        validate_create(make_job(gpus=0.5, workers=2), "", "")
    assert error.value.field == f"{RES}.num_gpus" and "num_workers == 1" in error.value.rule


@pytest.mark.parametrize(("job_id", "request_id", "field"), [
    ("Upper", "", "job_id"), ("9starts-with-digit", "", "job_id"), ("x" * 64, "", "job_id"),
    ("ok", "r" * 129, "request_id"),
])
def test_ids(job_id, request_id, field):
    with pytest.raises(InvalidArgument) as error:
        validate_create(make_job(), job_id, request_id)
    assert error.value.field == field


@pytest.mark.parametrize("change", [
    _set("spec.resources_per_worker.num_gpus", 0.25),
    _set("spec.resources_per_worker.num_gpus", 2.0),
    _set("spec.runtime_env.image", "registry.example.com:5000/team/paddle:3.3.1-gpu"),
    _set("spec.entrypoint", "train:main"),
    lambda j: j.labels.update({"example.com/team": "vision", "empty": ""}),
    _set("priority", -1000),
], ids=["quarter-gpu", "two-gpus", "image-with-registry", "top-level-module", "prefixed-label", "lowest-priority"])
def test_valid_jobs_pass(change):
    job = make_job()
    change(job)
    validate_create(job, "my-job-1", "r" * 128)


def test_missing_job():
    with pytest.raises(InvalidArgument) as error:
        validate_create(None, "", "")
    assert error.value.field == "job"


def test_non_retryable_kinds_must_be_known_failure_kinds():
    job = make_job()
    job.retry_policy.non_retryable_kinds.extend([common_pb2.FAILURE_KIND_USER_CODE])
    validate_job(job, "job")
    for bad in (common_pb2.FAILURE_KIND_UNSPECIFIED, 99):
        job.retry_policy.ClearField("non_retryable_kinds")
        job.retry_policy.non_retryable_kinds.extend([common_pb2.FAILURE_KIND_USER_CODE, bad])
        with pytest.raises(InvalidArgument) as raised:
            validate_job(job, "job")
        assert raised.value.field == "job.retry_policy.non_retryable_kinds[1]"
