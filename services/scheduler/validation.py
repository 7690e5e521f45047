"""Checks of client-supplied jobs: every rule names its field, and breaks raise InvalidArgument.

`validate_job(job, "job")` is also what experiments use for their trial template (with their
own field prefix), so that a sweep never queues trials CreateJob would reject. The spec's
rules are the ones the trainer applies at StartRun too (paddleray.services.common.training_spec).
"""

from __future__ import annotations

import math

from google.protobuf import duration_pb2

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2
from paddleray.services.common import idempotency, identity, training_spec
from paddleray.services.common import names as resource_names
from paddleray.services.common.errors import InvalidArgument
from paddleray.services.common.labels import validate_labels

MAX_TIMEOUT_S = training_spec.MAX_TIMEOUT_S
MAX_RETRIES = 100
MAX_BACKOFF_MULTIPLIER = 100.0
PRIORITY_RANGE = (-1000, 1000)



def validate_create(request_job: job_pb2.Job | None, job_id: str, request_id: str) -> None:
    if request_job is None:
        raise InvalidArgument("job", "required")
    if job_id:
        resource_names.check_id(job_id, "job_id")
    idempotency.check_request_id(request_id)
    validate_job(request_job, "job")


def validate_job(job: job_pb2.Job, field: str) -> None:
    """Checks every client-settable field of a Job; output-only fields are not looked at."""
    if len(job.display_name) > 256:
        raise InvalidArgument(f"{field}.display_name", "at most 256 characters")
    if not job.HasField("spec"):
        raise InvalidArgument(f"{field}.spec", "required")
    training_spec.validate_spec(job.spec, f"{field}.spec")
    low, high = PRIORITY_RANGE
    if not low <= job.priority <= high:
        raise InvalidArgument(f"{field}.priority", f"must be in {low}..{high}")
    if job.tenant and not identity.TENANT_PATTERN.fullmatch(job.tenant):
        raise InvalidArgument(f"{field}.tenant", "must be 1-63 characters of [a-z0-9-], starting and ending alphanumeric")
    validate_labels(job.labels, f"{field}.labels")
    _validate_retry(job.retry_policy, f"{field}.retry_policy")
    if job.HasField("timeout"):
        seconds = _duration_s(job.timeout, f"{field}.timeout")
        if not 0 < seconds <= MAX_TIMEOUT_S:
            raise InvalidArgument(f"{field}.timeout", "must be positive and at most 30 days")


def _validate_retry(policy: common_pb2.RetryPolicy, field: str) -> None:
    if not 0 <= policy.max_retries <= MAX_RETRIES:
        raise InvalidArgument(f"{field}.max_retries", f"must be in 0..{MAX_RETRIES}")
    initial = max_ = None
    if policy.HasField("initial_backoff"):
        initial = _duration_s(policy.initial_backoff, f"{field}.initial_backoff")
        if not 0 <= initial <= MAX_TIMEOUT_S:
            raise InvalidArgument(f"{field}.initial_backoff", "must be >= 0 and at most 30 days")
    if policy.HasField("max_backoff"):
        max_ = _duration_s(policy.max_backoff, f"{field}.max_backoff")
        if not 0 <= max_ <= MAX_TIMEOUT_S:
            raise InvalidArgument(f"{field}.max_backoff", "must be >= 0 and at most 30 days")
    if initial is not None and max_ is not None and max_ < initial:
        raise InvalidArgument(f"{field}.max_backoff", "must be >= initial_backoff")
    multiplier = policy.backoff_multiplier
    if not math.isfinite(multiplier) or (multiplier != 0 and not 1 <= multiplier <= MAX_BACKOFF_MULTIPLIER):
        raise InvalidArgument(f"{field}.backoff_multiplier", f"must be >= 1.0 and at most {MAX_BACKOFF_MULTIPLIER:g} (0 means 2.0)")
    for i, kind in enumerate(policy.non_retryable_kinds):
        if kind not in common_pb2.FailureKind.values() or kind == common_pb2.FAILURE_KIND_UNSPECIFIED:
            raise InvalidArgument(f"{field}.non_retryable_kinds[{i}]", f"unknown failure kind {kind}")


def _duration_s(d: duration_pb2.Duration, field: str) -> float:
    return training_spec.duration_seconds(d, field)
