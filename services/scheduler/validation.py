"""Checks of client-supplied jobs: every rule names its field, and breaks raise InvalidArgument.

`validate_job(job, "job")` is also what experiments use for their trial template (with their
own field prefix), so that a sweep never queues trials CreateJob would reject.
"""

from __future__ import annotations

import functools
import math
import re

from google.protobuf import duration_pb2

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2
from paddleray.services.common import entrypoints
from paddleray.services.common import names as resource_names
from paddleray.services.common.errors import InvalidArgument

MAX_CONFIG_BYTES = 1024 * 1024
MAX_TIMEOUT_S = 30 * 24 * 3600
MAX_RETRIES = 100
MAX_WORKERS = 1024
MAX_LABELS = 64
PRIORITY_RANGE = (-1000, 1000)

_LABEL_NAME = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_TENANT = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_ENV_VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# registry[:port]/path[:tag][@digest], as `docker pull` accepts (lowercase path components).
_IMAGE = re.compile(
    r"([a-zA-Z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?"
)


def validate_create(request_job: job_pb2.Job | None, job_id: str, request_id: str) -> None:
    if request_job is None:
        raise InvalidArgument("job", "required")
    if job_id:
        resource_names.check_id(job_id, "job_id")
    if len(request_id) > 128:
        raise InvalidArgument("request_id", "at most 128 characters")
    validate_job(request_job, "job")


def validate_job(job: job_pb2.Job, field: str) -> None:
    """Checks every client-settable field of a Job; output-only fields are not looked at."""
    if len(job.display_name) > 256:
        raise InvalidArgument(f"{field}.display_name", "at most 256 characters")
    if not job.HasField("spec"):
        raise InvalidArgument(f"{field}.spec", "required")
    validate_spec(job.spec, f"{field}.spec")
    low, high = PRIORITY_RANGE
    if not low <= job.priority <= high:
        raise InvalidArgument(f"{field}.priority", f"must be in {low}..{high}")
    if job.tenant and not _TENANT.fullmatch(job.tenant):
        raise InvalidArgument(f"{field}.tenant", "must be 1-63 characters of [a-z0-9-], starting and ending alphanumeric")
    validate_labels(job.labels, f"{field}.labels")
    _validate_retry(job.retry_policy, f"{field}.retry_policy")
    if job.HasField("timeout"):
        seconds = _duration_s(job.timeout, f"{field}.timeout")
        if not 0 < seconds <= MAX_TIMEOUT_S:
            raise InvalidArgument(f"{field}.timeout", "must be positive and at most 30 days")


def validate_spec(spec: common_pb2.TrainingSpec, field: str) -> None:
    if not spec.entrypoint:
        raise InvalidArgument(f"{field}.entrypoint", "required")
    entrypoints.check_form(spec.entrypoint, f"{field}.entrypoint")
    if spec.config.ByteSize() > MAX_CONFIG_BYTES:
        raise InvalidArgument(f"{field}.config", "at most 1 MiB serialized")
    if not 0 <= spec.num_workers <= MAX_WORKERS:
        raise InvalidArgument(f"{field}.num_workers", f"must be in 0..{MAX_WORKERS} (0 means 1)")
    _validate_resources(spec.resources_per_worker, spec.num_workers or 1, f"{field}.resources_per_worker")
    _validate_runtime_env(spec.runtime_env, f"{field}.runtime_env")
    _enum(common_pb2.PlacementStrategy, spec.placement_strategy, f"{field}.placement_strategy")
    policy = spec.checkpoint_policy
    if policy.keep_last < 0:
        raise InvalidArgument(f"{field}.checkpoint_policy.keep_last", "must be >= 0")
    if policy.keep_best < 0:
        raise InvalidArgument(f"{field}.checkpoint_policy.keep_best", "must be >= 0")
    _enum(common_pb2.MetricMode, policy.best_mode, f"{field}.checkpoint_policy.best_mode")
    if policy.keep_best and not policy.best_metric:
        raise InvalidArgument(f"{field}.checkpoint_policy.best_metric", "required when keep_best > 0")
    names = set()
    for i, dataset in enumerate(spec.datasets):
        where = f"{field}.datasets[{i}]"
        if not dataset.name:
            raise InvalidArgument(f"{where}.name", "required")
        if dataset.name in names:
            raise InvalidArgument(f"{where}.name", "must be unique among the datasets")
        names.add(dataset.name)
        if not dataset.uri:
            raise InvalidArgument(f"{where}.uri", "required")
        _enum(common_pb2.DatasetFormat, dataset.format, f"{where}.format")


def validate_labels(labels, field: str) -> None:
    if len(labels) > MAX_LABELS:
        raise InvalidArgument(field, f"at most {MAX_LABELS} labels")
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
            raise InvalidArgument(f"{field}[{key!r}]", "key prefix must be a DNS subdomain of at most 253 characters")
        if not _LABEL_NAME.fullmatch(name):
            raise InvalidArgument(
                f"{field}[{key!r}]", "key name must be 1-63 characters of [A-Za-z0-9._-], starting and ending alphanumeric"
            )
        if value and not _LABEL_NAME.fullmatch(value):
            raise InvalidArgument(
                f"{field}[{key!r}]", "value must be at most 63 characters of [A-Za-z0-9._-], starting and ending alphanumeric"
            )


def _validate_resources(res: common_pb2.Resources, workers: int, field: str) -> None:
    for name in ("num_cpus", "num_gpus"):
        _amount(getattr(res, name), f"{field}.{name}")
    gpus = res.num_gpus
    if gpus > 1 and not gpus.is_integer():
        raise InvalidArgument(f"{field}.num_gpus", "a fraction of a GPU must be below 1; above 1, whole GPUs only")
    if workers > 1 and not gpus.is_integer():
        raise InvalidArgument(f"{field}.num_gpus", "fractional GPUs need num_workers == 1 (multi-worker runs use whole GPUs)")
    if res.memory_bytes < 0:
        raise InvalidArgument(f"{field}.memory_bytes", "must be >= 0")
    for name, value in res.custom.items():
        if not name:
            raise InvalidArgument(f"{field}.custom", "resource names must not be empty")
        _amount(value, f"{field}.custom[{name!r}]")


def _amount(value: float, field: str) -> None:
    if not math.isfinite(value):
        raise InvalidArgument(field, "must be finite (not NaN or infinity)")
    if value < 0:
        raise InvalidArgument(field, "must be >= 0")
    # Admission adds amounts in exact milli-units; a finer fraction would be rounded silently.
    if abs(value * 1000 - round(value * 1000)) > 1e-6:
        raise InvalidArgument(field, "at most 3 decimal places")


def _validate_runtime_env(env: common_pb2.RuntimeEnv, field: str) -> None:
    # Empty means the image the Ray workers already run; anything else must be a reference.
    if env.image and (len(env.image) > 512 or not _IMAGE.fullmatch(env.image)):
        raise InvalidArgument(f"{field}.image", "must be a container image reference such as 'registry/name:tag'")
    for key in env.env_vars:
        if not _ENV_VAR.fullmatch(key):
            raise InvalidArgument(f"{field}.env_vars[{key!r}]", "names must match [A-Za-z_][A-Za-z0-9_]*")


def _validate_retry(policy: common_pb2.RetryPolicy, field: str) -> None:
    if not 0 <= policy.max_retries <= MAX_RETRIES:
        raise InvalidArgument(f"{field}.max_retries", f"must be in 0..{MAX_RETRIES}")
    initial = max_ = None
    if policy.HasField("initial_backoff"):
        initial = _duration_s(policy.initial_backoff, f"{field}.initial_backoff")
        if initial < 0:
            raise InvalidArgument(f"{field}.initial_backoff", "must be >= 0")
    if policy.HasField("max_backoff"):
        max_ = _duration_s(policy.max_backoff, f"{field}.max_backoff")
        if max_ < 0:
            raise InvalidArgument(f"{field}.max_backoff", "must be >= 0")
    if initial is not None and max_ is not None and max_ < initial:
        raise InvalidArgument(f"{field}.max_backoff", "must be >= initial_backoff")
    multiplier = policy.backoff_multiplier
    if not math.isfinite(multiplier) or (multiplier != 0 and multiplier < 1):
        raise InvalidArgument(f"{field}.backoff_multiplier", "must be finite and >= 1.0 (0 means 2.0)")
    for i, kind in enumerate(policy.non_retryable_kinds):
        if kind not in _enum_values(common_pb2.FailureKind) or kind == common_pb2.FAILURE_KIND_UNSPECIFIED:
            raise InvalidArgument(f"{field}.non_retryable_kinds[{i}]", f"unknown failure kind {kind}")


def _duration_s(d: duration_pb2.Duration, field: str) -> float:
    if not -999_999_999 <= d.nanos <= 999_999_999 or (d.seconds and d.nanos and (d.seconds > 0) != (d.nanos > 0)):
        raise InvalidArgument(field, "malformed duration (nanos out of range or of the wrong sign)")
    return d.seconds + d.nanos / 1e9


@functools.cache
def _enum_values(enum) -> frozenset[int]:
    return frozenset(enum.values())


def _enum(enum, value: int, field: str) -> None:
    if value not in _enum_values(enum):
        raise InvalidArgument(field, f"unknown value {value}")
