import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from paddleray.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATE_UNSPECIFIED: _ClassVar[RunState]
    RUN_STATE_PENDING: _ClassVar[RunState]
    RUN_STATE_STARTING: _ClassVar[RunState]
    RUN_STATE_RUNNING: _ClassVar[RunState]
    RUN_STATE_STOPPING: _ClassVar[RunState]
    RUN_STATE_SUCCEEDED: _ClassVar[RunState]
    RUN_STATE_FAILED: _ClassVar[RunState]
    RUN_STATE_STOPPED: _ClassVar[RunState]
    RUN_STATE_TIMED_OUT: _ClassVar[RunState]
RUN_STATE_UNSPECIFIED: RunState
RUN_STATE_PENDING: RunState
RUN_STATE_STARTING: RunState
RUN_STATE_RUNNING: RunState
RUN_STATE_STOPPING: RunState
RUN_STATE_SUCCEEDED: RunState
RUN_STATE_FAILED: RunState
RUN_STATE_STOPPED: RunState
RUN_STATE_TIMED_OUT: RunState

class Worker(_message.Message):
    __slots__ = ("rank", "local_rank", "node_id", "gpu_ids", "warm")
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    GPU_IDS_FIELD_NUMBER: _ClassVar[int]
    WARM_FIELD_NUMBER: _ClassVar[int]
    rank: int
    local_rank: int
    node_id: str
    gpu_ids: _containers.RepeatedScalarFieldContainer[str]
    warm: bool
    def __init__(self, rank: _Optional[int] = ..., local_rank: _Optional[int] = ..., node_id: _Optional[str] = ..., gpu_ids: _Optional[_Iterable[str]] = ..., warm: _Optional[bool] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("name", "spec", "job", "timeout", "resume_from", "state", "state_reason", "workers", "latest_metrics", "latest_checkpoint", "best_checkpoint", "create_time", "start_time", "end_time", "labels", "failure", "tenant")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    RESUME_FROM_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    LATEST_METRICS_FIELD_NUMBER: _ClassVar[int]
    LATEST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    BEST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    name: str
    spec: _common_pb2.TrainingSpec
    job: str
    timeout: _duration_pb2.Duration
    resume_from: _common_pb2.Checkpoint
    state: RunState
    state_reason: str
    workers: _containers.RepeatedCompositeFieldContainer[Worker]
    latest_metrics: _common_pb2.MetricsReport
    latest_checkpoint: _common_pb2.Checkpoint
    best_checkpoint: _common_pb2.Checkpoint
    create_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    labels: _containers.ScalarMap[str, str]
    failure: _common_pb2.Failure
    tenant: str
    def __init__(self, name: _Optional[str] = ..., spec: _Optional[_Union[_common_pb2.TrainingSpec, _Mapping]] = ..., job: _Optional[str] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., resume_from: _Optional[_Union[_common_pb2.Checkpoint, _Mapping]] = ..., state: _Optional[_Union[RunState, str]] = ..., state_reason: _Optional[str] = ..., workers: _Optional[_Iterable[_Union[Worker, _Mapping]]] = ..., latest_metrics: _Optional[_Union[_common_pb2.MetricsReport, _Mapping]] = ..., latest_checkpoint: _Optional[_Union[_common_pb2.Checkpoint, _Mapping]] = ..., best_checkpoint: _Optional[_Union[_common_pb2.Checkpoint, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., failure: _Optional[_Union[_common_pb2.Failure, _Mapping]] = ..., tenant: _Optional[str] = ...) -> None: ...

class RunStateChange(_message.Message):
    __slots__ = ("from_state", "to_state", "reason", "failure")
    FROM_STATE_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    from_state: RunState
    to_state: RunState
    reason: str
    failure: _common_pb2.Failure
    def __init__(self, from_state: _Optional[_Union[RunState, str]] = ..., to_state: _Optional[_Union[RunState, str]] = ..., reason: _Optional[str] = ..., failure: _Optional[_Union[_common_pb2.Failure, _Mapping]] = ...) -> None: ...

class RunEvent(_message.Message):
    __slots__ = ("sequence", "time", "state_change", "metrics", "checkpoint")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    STATE_CHANGE_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    time: _timestamp_pb2.Timestamp
    state_change: RunStateChange
    metrics: _common_pb2.MetricsReport
    checkpoint: _common_pb2.Checkpoint
    def __init__(self, sequence: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., state_change: _Optional[_Union[RunStateChange, _Mapping]] = ..., metrics: _Optional[_Union[_common_pb2.MetricsReport, _Mapping]] = ..., checkpoint: _Optional[_Union[_common_pb2.Checkpoint, _Mapping]] = ...) -> None: ...

class ResourceAmounts(_message.Message):
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

class NodeResources(_message.Message):
    __slots__ = ("node_id", "address", "total", "available")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    address: str
    total: ResourceAmounts
    available: ResourceAmounts
    def __init__(self, node_id: _Optional[str] = ..., address: _Optional[str] = ..., total: _Optional[_Union[ResourceAmounts, _Mapping]] = ..., available: _Optional[_Union[ResourceAmounts, _Mapping]] = ...) -> None: ...
