"""The one validation of a TrainingSpec, shared by the scheduler (CreateJob, CreateExperiment)
and the trainer (StartRun), so that no spec is accepted by one and refused by the other.

Every rule names its field and raises InvalidArgument. Beyond the semantic rules, the bounds
here keep every value within what the code downstream can compute with: numbers finite and
far from the float range (admission adds amounts in milli-units), Durations within their proto
range, Structs shallow enough for protobuf's recursion limits and JSON, strings short enough
for file names and logs. Checks that need the caller's world (the entrypoint allowlist, stored
packages, files on disk) stay with the service that has it.
"""

from __future__ import annotations

import functools
import math
import re

from google.protobuf import duration_pb2, struct_pb2

from paddleray.common.v1 import common_pb2
from paddleray.services.common import entrypoints
from paddleray.services.common.errors import InvalidArgument

MAX_CONFIG_BYTES = 1024 * 1024
# Of a job's and a run's timeout (and a retry backoff).
MAX_TIMEOUT_S = 30 * 24 * 3600
# Struct/ListValue nesting. protobuf's parser stops at 100 nested messages and a Struct level
# is two (Struct -> Value): a CreateJobRequest with a config nested 33 levels cannot be decoded.
# The margin leaves room for the messages that carry a spec (an experiment's trial template,
# StartRunRequest, a stored Job).
MAX_STRUCT_DEPTH = 24
MAX_WORKERS = 1024
# A worker's (or serving replica's) CPUs when Resources.num_cpus is unset.
DEFAULT_CPUS = 1.0
# Per worker. Far above any machine, far below where float sums lose integers or overflow.
MAX_RESOURCE_AMOUNT = 1e9
MAX_MEMORY_BYTES = 1 << 50
MAX_PATH_CHARS = 1024
MAX_NAME_CHARS = 256
MAX_ENV_VARS = 256
MAX_ENV_VALUE_CHARS = 32 * 1024
MAX_DATASETS = 64
# google.protobuf.Duration's documented range (about 10,000 years).
_DURATION_MAX_SECONDS = 315_576_000_000

# Ray's own resource names, each set by its own field.
_RESERVED_RESOURCES = ("CPU", "GPU", "memory")
_ENV_VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# registry[:port]/path[:tag][@digest], as `docker pull` accepts (lowercase path components).
_IMAGE = re.compile(
    r"([a-zA-Z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?"
)


def validate_spec(spec: common_pb2.TrainingSpec, field: str = "spec") -> None:
    """Every rule a TrainingSpec must meet wherever it is accepted."""
    if not spec.entrypoint:
        raise InvalidArgument(f"{field}.entrypoint", "required")
    _max_chars(spec.entrypoint, MAX_NAME_CHARS, f"{field}.entrypoint")
    entrypoints.check_form(spec.entrypoint, f"{field}.entrypoint")
    validate_config(spec.config, f"{field}.config")
    # Explicit presence: unset is 1, an explicit 0 (or less) is refused, not read as 1.
    if spec.HasField("num_workers") and not 1 <= spec.num_workers <= MAX_WORKERS:
        raise InvalidArgument(f"{field}.num_workers", f"must be in 1..{MAX_WORKERS} (leave it unset for 1)")
    _validate_resources(spec.resources_per_worker, spec.num_workers or 1, f"{field}.resources_per_worker")
    _validate_runtime_env(spec.runtime_env, f"{field}.runtime_env")
    check_enum(common_pb2.PlacementStrategy, spec.placement_strategy, f"{field}.placement_strategy")
    _validate_checkpoint_policy(spec.checkpoint_policy, f"{field}.checkpoint_policy")
    _validate_datasets(spec.datasets, f"{field}.datasets")
    if spec.HasField("init_from"):
        _validate_init_from(spec.init_from, f"{field}.init_from")


def validate_config(config: struct_pb2.Struct, field: str) -> None:
    """A Struct the services can store, convert and hand to user code: at most 1 MiB, nested at
    most MAX_STRUCT_DEPTH levels, every number finite (JSON has no NaN or infinity)."""
    if config.ByteSize() > MAX_CONFIG_BYTES:
        raise InvalidArgument(field, "at most 1 MiB serialized")
    check_struct_values(config, field)


def check_struct_values(message: struct_pb2.Struct | struct_pb2.ListValue | struct_pb2.Value, field: str) -> None:
    """Nesting and finite numbers of a Struct, ListValue or Value; the path of the first break
    is in the error. Iterative: a deep Struct must not exhaust Python's recursion limit here."""
    stack: list[tuple[object, str, int]] = [(message, field, 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, struct_pb2.Value):
            kind = node.WhichOneof("kind")
            if kind == "number_value" and not math.isfinite(node.number_value):
                raise InvalidArgument(path, "numbers must be finite (JSON has no NaN or Infinity)")
            if kind == "struct_value":
                stack.append((node.struct_value, path, depth))
            elif kind == "list_value":
                stack.append((node.list_value, path, depth))
            continue
        if depth >= MAX_STRUCT_DEPTH:
            raise InvalidArgument(path, f"nested more than {MAX_STRUCT_DEPTH} levels deep")
        if isinstance(node, struct_pb2.Struct):
            stack.extend((value, f"{path}.{key}", depth + 1) for key, value in node.fields.items())
        elif isinstance(node, struct_pb2.ListValue):
            stack.extend((value, f"{path}[{i}]", depth + 1) for i, value in enumerate(node.values))


def duration_seconds(duration: duration_pb2.Duration, field: str, maximum_s: float | None = None) -> float:
    """A Duration as seconds: well-formed (nanos in range and of the seconds' sign), within the
    Duration's proto range, and at most maximum_s when given."""
    d = duration
    if not -999_999_999 <= d.nanos <= 999_999_999 or (d.seconds and d.nanos and (d.seconds > 0) != (d.nanos > 0)):
        raise InvalidArgument(field, "malformed duration (nanos out of range or of the wrong sign)")
    if abs(d.seconds) > _DURATION_MAX_SECONDS:
        raise InvalidArgument(field, f"out of the Duration range (at most {_DURATION_MAX_SECONDS} seconds)")
    seconds = d.seconds + d.nanos / 1e9
    if maximum_s is not None and seconds > maximum_s:
        raise InvalidArgument(field, f"must be at most {maximum_s:g} seconds")
    return seconds


def finite_number(value: float, field: str, limit: float = MAX_RESOURCE_AMOUNT) -> None:
    """A finite number of magnitude at most limit."""
    if not math.isfinite(value):
        raise InvalidArgument(field, "must be finite (not NaN or infinity)")
    if abs(value) > limit:
        raise InvalidArgument(field, f"magnitude must be at most {limit:g}")


@functools.cache
def _enum_values(enum) -> frozenset[int]:
    return frozenset(enum.values())


def check_enum(enum, value: int, field: str) -> None:
    if value not in _enum_values(enum):
        raise InvalidArgument(field, f"unknown value {value}")


def _max_chars(value: str, limit: int, field: str) -> None:
    if len(value) > limit:
        raise InvalidArgument(field, f"at most {limit} characters")


def _path(value: str, field: str) -> None:
    """A path or URI: bounded, and without NUL, which no path can hold (the trainer's
    Path.resolve() raised ValueError on one, answered INTERNAL)."""
    _max_chars(value, MAX_PATH_CHARS, field)
    if "\0" in value:
        raise InvalidArgument(field, "must not contain NUL characters")


def cpus(resources: common_pb2.Resources) -> float:
    """A worker's (or replica's) CPUs: num_cpus, or DEFAULT_CPUS when it is unset."""
    return resources.num_cpus if resources.HasField("num_cpus") else DEFAULT_CPUS


def check_cpus(resources: common_pb2.Resources, field: str) -> None:
    """num_cpus is unset (DEFAULT_CPUS) or above 0: a worker always takes some CPU, and an
    explicit 0 would otherwise be read as unset, silently."""
    if resources.HasField("num_cpus") and not resources.num_cpus > 0:
        raise InvalidArgument(f"{field}.num_cpus", f"must be > 0 (leave it unset for {DEFAULT_CPUS:g})")


def _validate_resources(res: common_pb2.Resources, workers: int, field: str) -> None:
    for name in ("num_cpus", "num_gpus"):
        _amount(getattr(res, name), f"{field}.{name}")
    check_cpus(res, field)
    gpus = res.num_gpus
    if gpus > 1 and not gpus.is_integer():
        raise InvalidArgument(f"{field}.num_gpus", "a fraction of a GPU must be below 1; above 1, whole GPUs only")
    if workers > 1 and not gpus.is_integer():
        raise InvalidArgument(f"{field}.num_gpus", "fractional GPUs need num_workers == 1 (multi-worker runs use whole GPUs)")
    if not 0 <= res.memory_bytes <= MAX_MEMORY_BYTES:
        raise InvalidArgument(f"{field}.memory_bytes", "must be >= 0 and at most 1 PiB")
    for name, value in res.custom.items():
        if not name:
            raise InvalidArgument(f"{field}.custom", "resource names must not be empty")
        _max_chars(name, MAX_NAME_CHARS, f"{field}.custom")
        if name in _RESERVED_RESOURCES:
            raise InvalidArgument(f"{field}.custom[{name!r}]", f"{name!r} is set by its own field")
        _amount(value, f"{field}.custom[{name!r}]")


def _amount(value: float, field: str) -> None:
    finite_number(value, field)
    if value < 0:
        raise InvalidArgument(field, "must be >= 0")
    # Admission adds amounts in exact milli-units; a finer fraction would be rounded silently.
    if abs(value * 1000 - round(value * 1000)) > 1e-6:
        raise InvalidArgument(field, "at most 3 decimal places")


def _validate_runtime_env(env: common_pb2.RuntimeEnv, field: str) -> None:
    # Empty means the image the Ray workers already run; anything else must be a reference.
    if env.image and (len(env.image) > 512 or not _IMAGE.fullmatch(env.image)):
        raise InvalidArgument(f"{field}.image", "must be a container image reference such as 'registry/name:tag'")
    _path(env.working_dir, f"{field}.working_dir")
    if len(env.env_vars) > MAX_ENV_VARS:
        raise InvalidArgument(f"{field}.env_vars", f"at most {MAX_ENV_VARS} variables")
    for key, value in env.env_vars.items():
        if len(key) > MAX_NAME_CHARS or not _ENV_VAR.fullmatch(key):
            raise InvalidArgument(f"{field}.env_vars[{key[:MAX_NAME_CHARS]!r}]",
                                  f"names must match [A-Za-z_][A-Za-z0-9_]* (at most {MAX_NAME_CHARS} characters)")
        _max_chars(value, MAX_ENV_VALUE_CHARS, f"{field}.env_vars[{key!r}]")


def _validate_checkpoint_policy(policy: common_pb2.CheckpointPolicy, field: str) -> None:
    if policy.keep_last < 0:
        raise InvalidArgument(f"{field}.keep_last", "must be >= 0")
    if policy.keep_best < 0:
        raise InvalidArgument(f"{field}.keep_best", "must be >= 0")
    check_enum(common_pb2.MetricMode, policy.best_mode, f"{field}.best_mode")
    _max_chars(policy.best_metric, MAX_NAME_CHARS, f"{field}.best_metric")
    if policy.best_metric and policy.best_mode == common_pb2.METRIC_MODE_UNSPECIFIED:
        raise InvalidArgument(f"{field}.best_mode", "must be MIN or MAX when best_metric is set")
    if policy.keep_best and not policy.best_metric:
        raise InvalidArgument(f"{field}.best_metric", "required when keep_best > 0")


def _validate_datasets(datasets, field: str) -> None:
    if len(datasets) > MAX_DATASETS:
        raise InvalidArgument(field, f"at most {MAX_DATASETS} datasets")
    names = set()
    for i, dataset in enumerate(datasets):
        where = f"{field}[{i}]"
        if not dataset.name:
            raise InvalidArgument(f"{where}.name", "required")
        _max_chars(dataset.name, MAX_NAME_CHARS, f"{where}.name")
        if dataset.name in names:
            raise InvalidArgument(f"{where}.name", "must be unique among the datasets")
        names.add(dataset.name)
        if not dataset.uri:
            raise InvalidArgument(f"{where}.uri", "required")
        _path(dataset.uri, f"{where}.uri")
        check_enum(common_pb2.DatasetFormat, dataset.format, f"{where}.format")


def _validate_init_from(init_from: common_pb2.InitFrom, field: str) -> None:
    for name in ("checkpoint_uri", "job", "model_version", "resolved_uri"):
        _path(getattr(init_from, name), f"{field}.{name}")
