import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MetricMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    METRIC_MODE_UNSPECIFIED: _ClassVar[MetricMode]
    METRIC_MODE_MIN: _ClassVar[MetricMode]
    METRIC_MODE_MAX: _ClassVar[MetricMode]

class PlacementStrategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PLACEMENT_STRATEGY_UNSPECIFIED: _ClassVar[PlacementStrategy]
    PLACEMENT_STRATEGY_PACK: _ClassVar[PlacementStrategy]
    PLACEMENT_STRATEGY_SPREAD: _ClassVar[PlacementStrategy]
    PLACEMENT_STRATEGY_STRICT_PACK: _ClassVar[PlacementStrategy]
    PLACEMENT_STRATEGY_STRICT_SPREAD: _ClassVar[PlacementStrategy]

class DatasetFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DATASET_FORMAT_UNSPECIFIED: _ClassVar[DatasetFormat]
    DATASET_FORMAT_PARQUET: _ClassVar[DatasetFormat]
    DATASET_FORMAT_CSV: _ClassVar[DatasetFormat]
    DATASET_FORMAT_NPY: _ClassVar[DatasetFormat]

class LogStream(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOG_STREAM_UNSPECIFIED: _ClassVar[LogStream]
    LOG_STREAM_STDOUT: _ClassVar[LogStream]
    LOG_STREAM_STDERR: _ClassVar[LogStream]

class FailureKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAILURE_KIND_UNSPECIFIED: _ClassVar[FailureKind]
    FAILURE_KIND_USER_CODE: _ClassVar[FailureKind]
    FAILURE_KIND_WORKER_LOST: _ClassVar[FailureKind]
    FAILURE_KIND_TRAINER_ERROR: _ClassVar[FailureKind]
    FAILURE_KIND_TIMEOUT: _ClassVar[FailureKind]
    FAILURE_KIND_STOPPED: _ClassVar[FailureKind]
    FAILURE_KIND_PLACEMENT_IMPOSSIBLE: _ClassVar[FailureKind]
METRIC_MODE_UNSPECIFIED: MetricMode
METRIC_MODE_MIN: MetricMode
METRIC_MODE_MAX: MetricMode
PLACEMENT_STRATEGY_UNSPECIFIED: PlacementStrategy
PLACEMENT_STRATEGY_PACK: PlacementStrategy
PLACEMENT_STRATEGY_SPREAD: PlacementStrategy
PLACEMENT_STRATEGY_STRICT_PACK: PlacementStrategy
PLACEMENT_STRATEGY_STRICT_SPREAD: PlacementStrategy
DATASET_FORMAT_UNSPECIFIED: DatasetFormat
DATASET_FORMAT_PARQUET: DatasetFormat
DATASET_FORMAT_CSV: DatasetFormat
DATASET_FORMAT_NPY: DatasetFormat
LOG_STREAM_UNSPECIFIED: LogStream
LOG_STREAM_STDOUT: LogStream
LOG_STREAM_STDERR: LogStream
FAILURE_KIND_UNSPECIFIED: FailureKind
FAILURE_KIND_USER_CODE: FailureKind
FAILURE_KIND_WORKER_LOST: FailureKind
FAILURE_KIND_TRAINER_ERROR: FailureKind
FAILURE_KIND_TIMEOUT: FailureKind
FAILURE_KIND_STOPPED: FailureKind
FAILURE_KIND_PLACEMENT_IMPOSSIBLE: FailureKind

class Resources(_message.Message):
    __slots__ = ("num_cpus", "num_gpus", "memory_bytes", "custom")
    class CustomEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NUM_CPUS_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_FIELD_NUMBER: _ClassVar[int]
    num_cpus: float
    num_gpus: float
    memory_bytes: int
    custom: _containers.ScalarMap[str, float]
    def __init__(self, num_cpus: _Optional[float] = ..., num_gpus: _Optional[float] = ..., memory_bytes: _Optional[int] = ..., custom: _Optional[_Mapping[str, float]] = ...) -> None: ...

class RetryPolicy(_message.Message):
    __slots__ = ("max_retries", "initial_backoff", "max_backoff", "backoff_multiplier", "non_retryable_kinds")
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    INITIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    NON_RETRYABLE_KINDS_FIELD_NUMBER: _ClassVar[int]
    max_retries: int
    initial_backoff: _duration_pb2.Duration
    max_backoff: _duration_pb2.Duration
    backoff_multiplier: float
    non_retryable_kinds: _containers.RepeatedScalarFieldContainer[FailureKind]
    def __init__(self, max_retries: _Optional[int] = ..., initial_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., backoff_multiplier: _Optional[float] = ..., non_retryable_kinds: _Optional[_Iterable[_Union[FailureKind, str]]] = ...) -> None: ...

class CheckpointPolicy(_message.Message):
    __slots__ = ("keep_last", "best_metric", "best_mode", "keep_best", "commit_in_background")
    KEEP_LAST_FIELD_NUMBER: _ClassVar[int]
    BEST_METRIC_FIELD_NUMBER: _ClassVar[int]
    BEST_MODE_FIELD_NUMBER: _ClassVar[int]
    KEEP_BEST_FIELD_NUMBER: _ClassVar[int]
    COMMIT_IN_BACKGROUND_FIELD_NUMBER: _ClassVar[int]
    keep_last: int
    best_metric: str
    best_mode: MetricMode
    keep_best: int
    commit_in_background: bool
    def __init__(self, keep_last: _Optional[int] = ..., best_metric: _Optional[str] = ..., best_mode: _Optional[_Union[MetricMode, str]] = ..., keep_best: _Optional[int] = ..., commit_in_background: _Optional[bool] = ...) -> None: ...

class RuntimeEnv(_message.Message):
    __slots__ = ("image", "env_vars", "working_dir")
    class EnvVarsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    ENV_VARS_FIELD_NUMBER: _ClassVar[int]
    WORKING_DIR_FIELD_NUMBER: _ClassVar[int]
    image: str
    env_vars: _containers.ScalarMap[str, str]
    working_dir: str
    def __init__(self, image: _Optional[str] = ..., env_vars: _Optional[_Mapping[str, str]] = ..., working_dir: _Optional[str] = ...) -> None: ...

class Dataset(_message.Message):
    __slots__ = ("name", "uri", "format")
    NAME_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    name: str
    uri: str
    format: DatasetFormat
    def __init__(self, name: _Optional[str] = ..., uri: _Optional[str] = ..., format: _Optional[_Union[DatasetFormat, str]] = ...) -> None: ...

class TrainingSpec(_message.Message):
    __slots__ = ("entrypoint", "config", "num_workers", "resources_per_worker", "runtime_env", "placement_strategy", "checkpoint_policy", "datasets", "init_from")
    ENTRYPOINT_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    NUM_WORKERS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_PER_WORKER_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_ENV_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_POLICY_FIELD_NUMBER: _ClassVar[int]
    DATASETS_FIELD_NUMBER: _ClassVar[int]
    INIT_FROM_FIELD_NUMBER: _ClassVar[int]
    entrypoint: str
    config: _struct_pb2.Struct
    num_workers: int
    resources_per_worker: Resources
    runtime_env: RuntimeEnv
    placement_strategy: PlacementStrategy
    checkpoint_policy: CheckpointPolicy
    datasets: _containers.RepeatedCompositeFieldContainer[Dataset]
    init_from: InitFrom
    def __init__(self, entrypoint: _Optional[str] = ..., config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., num_workers: _Optional[int] = ..., resources_per_worker: _Optional[_Union[Resources, _Mapping]] = ..., runtime_env: _Optional[_Union[RuntimeEnv, _Mapping]] = ..., placement_strategy: _Optional[_Union[PlacementStrategy, str]] = ..., checkpoint_policy: _Optional[_Union[CheckpointPolicy, _Mapping]] = ..., datasets: _Optional[_Iterable[_Union[Dataset, _Mapping]]] = ..., init_from: _Optional[_Union[InitFrom, _Mapping]] = ...) -> None: ...

class InitFrom(_message.Message):
    __slots__ = ("checkpoint_uri", "job", "model_version", "resolved_uri")
    CHECKPOINT_URI_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_URI_FIELD_NUMBER: _ClassVar[int]
    checkpoint_uri: str
    job: str
    model_version: str
    resolved_uri: str
    def __init__(self, checkpoint_uri: _Optional[str] = ..., job: _Optional[str] = ..., model_version: _Optional[str] = ..., resolved_uri: _Optional[str] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("uri", "step", "epoch", "metrics", "create_time")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    URI_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    uri: str
    step: int
    epoch: int
    metrics: _containers.ScalarMap[str, float]
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, uri: _Optional[str] = ..., step: _Optional[int] = ..., epoch: _Optional[int] = ..., metrics: _Optional[_Mapping[str, float]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class MetricsReport(_message.Message):
    __slots__ = ("step", "metrics")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    STEP_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    step: int
    metrics: _containers.ScalarMap[str, float]
    def __init__(self, step: _Optional[int] = ..., metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...

class LogLine(_message.Message):
    __slots__ = ("rank", "stream", "text", "time")
    RANK_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    rank: int
    stream: LogStream
    text: str
    time: _timestamp_pb2.Timestamp
    def __init__(self, rank: _Optional[int] = ..., stream: _Optional[_Union[LogStream, str]] = ..., text: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Failure(_message.Message):
    __slots__ = ("kind", "rank", "message", "traceback", "node_id")
    KIND_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    kind: FailureKind
    rank: int
    message: str
    traceback: str
    node_id: str
    def __init__(self, kind: _Optional[_Union[FailureKind, str]] = ..., rank: _Optional[int] = ..., message: _Optional[str] = ..., traceback: _Optional[str] = ..., node_id: _Optional[str] = ...) -> None: ...
