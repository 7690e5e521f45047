"""Checks of a client's Experiment: every rule names its field; the trial template is checked
with the jobs' own rules (validation.validate_job), so a sweep never queues a trial that
CreateJob would reject."""

from __future__ import annotations

from google.protobuf import struct_pb2

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import experiment_pb2, job_pb2
from paddleray.services.common import errors, training_spec
from paddleray.services.scheduler import asha, search, validation

MAX_DISPLAY_NAME = 256
# Every trial job stores its own config: the whole sweep's configs are bounded, not only each.
MAX_SWEEP_CONFIG_BYTES = 256 << 20


def validate_experiment(experiment: experiment_pb2.Experiment) -> list[search.TrialParameters]:
    """Checks every client field; returns the plan. Every trial's job is checked like CreateJob."""
    if len(experiment.display_name) > MAX_DISPLAY_NAME:
        raise errors.InvalidArgument("experiment.display_name", f"at most {MAX_DISPLAY_NAME} characters")
    if not experiment.metric:
        raise errors.InvalidArgument("experiment.metric", "required: the reported metric that ranks trials")
    if experiment.mode not in (common_pb2.METRIC_MODE_MIN, common_pb2.METRIC_MODE_MAX):
        raise errors.InvalidArgument("experiment.mode", "must be METRIC_MODE_MIN or METRIC_MODE_MAX")
    if experiment.max_concurrent_trials < 0:
        raise errors.InvalidArgument("experiment.max_concurrent_trials", "must be >= 0 (0 means no limit)")
    if not experiment.HasField("trial_template"):
        raise errors.InvalidArgument("experiment.trial_template", "required")
    validation.validate_labels(experiment.labels, "experiment.labels")
    template = job_pb2.Job()
    template.CopyFrom(experiment.trial_template)
    template.labels.update(experiment.labels)
    validation.validate_job(template, "experiment.trial_template")
    asha.config_from_proto(experiment)
    trials = search.count_trials(experiment)
    if trials * template.spec.config.ByteSize() > MAX_SWEEP_CONFIG_BYTES:
        raise errors.InvalidArgument(
            "experiment.trial_template.spec.config",
            f"trials x config size must be at most {MAX_SWEEP_CONFIG_BYTES >> 20} MiB ({trials} trials)",
        )
    plan = search.expand(experiment)
    for parameters in plan:
        config: struct_pb2.Struct = search.apply_to_config(template.spec.config, parameters)
        if config.ByteSize() > training_spec.MAX_CONFIG_BYTES:
            raise errors.InvalidArgument(
                "experiment.trial_template.spec.config", "at most 1 MiB serialized with a trial's parameters"
            )
        training_spec.check_struct_values(config, "experiment.trial_template.spec.config (with a trial's parameters)")
    return plan
