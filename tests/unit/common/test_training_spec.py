"""The one validation of a TrainingSpec: inputs the scheduler once accepted and the trainer then
failed on (INTERNAL at every StartRun retry) are INVALID_ARGUMENT naming the field in both."""

from __future__ import annotations

import pytest
from google.protobuf import duration_pb2, struct_pb2

from paddleray.common.v1 import common_pb2
from paddleray.services.common import errors, training_spec
from paddleray.services.scheduler.validation import validate_create
from paddleray.services.trainer.spec import run_spec
from support.scheduler import make_job

pytestmark = pytest.mark.unit

RES = "resources_per_worker"


def _deep(levels: int) -> struct_pb2.Struct:
    root = struct_pb2.Struct()
    node = root
    for _ in range(levels):
        node = node.fields["a"].struct_value
    return root


def _config(data) -> struct_pb2.Struct:
    config = struct_pb2.Struct()
    config.update(data)
    return config


# (id, change of a valid spec, field under the spec, words of the rule)
CASES = [
    ("NaN in config", lambda s: s.config.CopyFrom(_config({"lr": float("nan")})), "config.lr", "finite"),
    ("Infinity deep in a config list", lambda s: s.config.CopyFrom(_config({"opt": {"betas": [0.9, float("inf")]}})),
     "config.opt.betas[1]", "finite"),
    ("config nested 30 levels", lambda s: s.config.CopyFrom(_deep(30)), "config", "nested"),
    ("5,000-character working_dir", lambda s: setattr(s.runtime_env, "working_dir", "/" + "d" * 5000),
     "runtime_env.working_dir", "at most 1024 characters"),
    ("cpus of 1.8e305", lambda s: setattr(s.resources_per_worker, "num_cpus", 1.8e305), f"{RES}.num_cpus", "at most"),
    ("custom amount of 1e308", lambda s: s.resources_per_worker.custom.update({"tpu": 1e308}),
     f"{RES}.custom['tpu']", "at most"),
    ("memory of 2^62 bytes", lambda s: setattr(s.resources_per_worker, "memory_bytes", 2**62),
     f"{RES}.memory_bytes", "1 PiB"),
    ("custom resource named CPU", lambda s: s.resources_per_worker.custom.update({"CPU": 1.0}),
     f"{RES}.custom['CPU']", "own field"),
    ("best_metric without a mode", lambda s: setattr(s.checkpoint_policy, "best_metric", "loss"),
     "checkpoint_policy.best_mode", "MIN or MAX"),
    ("huge env var value", lambda s: s.runtime_env.env_vars.update({"X": "v" * 40_000}),
     "runtime_env.env_vars['X']", "characters"),
    ("huge dataset uri", lambda s: s.datasets.add(name="d", uri="/" + "u" * 5000), "datasets[0].uri", "characters"),
    # Found by tests/reliability: a NUL made the trainer's Path.resolve() raise ValueError (INTERNAL).
    ("NUL in a dataset uri", lambda s: s.datasets.add(name="d", uri="data/a\0b.csv"), "datasets[0].uri", "NUL"),
    ("NUL in working_dir", lambda s: setattr(s.runtime_env, "working_dir", "/tmp/\0"), "runtime_env.working_dir",
     "NUL"),
    ("NUL in init_from.checkpoint_uri", lambda s: setattr(s.init_from, "checkpoint_uri", "\0"),
     "init_from.checkpoint_uri", "NUL"),
]


@pytest.mark.parametrize(("change", "field", "rule"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_scheduler_and_the_trainer_refuse_alike(change, field, rule):
    job = make_job()
    change(job.spec)
    with pytest.raises(errors.InvalidArgument) as at_create:
        validate_create(job, "", "")
    assert at_create.value.field.startswith(f"job.spec.{field}") and rule in at_create.value.rule
    spec = common_pb2.TrainingSpec()
    spec.CopyFrom(job.spec)
    with pytest.raises(errors.InvalidArgument) as at_start:
        run_spec(spec, ["pkg"])
    assert at_start.value.field.startswith(f"spec.{field}") and rule in at_start.value.rule


def test_a_config_at_the_depth_limit_passes():
    training_spec.validate_config(_deep(training_spec.MAX_STRUCT_DEPTH - 1), "config")


@pytest.mark.parametrize("seconds", [2**63 - 1, 315_576_000_001, -(2**63)])
def test_durations_beyond_their_proto_range_are_refused(seconds):
    with pytest.raises(errors.InvalidArgument) as raised:
        training_spec.duration_seconds(duration_pb2.Duration(seconds=seconds), "job.timeout")
    assert raised.value.field == "job.timeout" and "range" in raised.value.rule


def test_a_backoff_of_2_63_seconds_is_refused_at_create():
    job = make_job()
    job.retry_policy.initial_backoff.CopyFrom(duration_pb2.Duration(seconds=2**63 - 1))
    with pytest.raises(errors.InvalidArgument) as raised:
        validate_create(job, "", "")
    assert raised.value.field == "job.retry_policy.initial_backoff"
    job = make_job()
    job.retry_policy.backoff_multiplier = 1e308
    with pytest.raises(errors.InvalidArgument) as raised:
        validate_create(job, "", "")
    assert raised.value.field == "job.retry_policy.backoff_multiplier"
