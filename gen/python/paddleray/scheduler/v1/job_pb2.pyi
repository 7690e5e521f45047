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

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_QUEUED: _ClassVar[JobState]
    JOB_STATE_STARTING: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_RETRYING: _ClassVar[JobState]
    JOB_STATE_SUCCEEDED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_CANCELLED: _ClassVar[JobState]
    JOB_STATE_TIMED_OUT: _ClassVar[JobState]
    JOB_STATE_EARLY_STOPPED: _ClassVar[JobState]

class JobView(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_VIEW_UNSPECIFIED: _ClassVar[JobView]
    JOB_VIEW_BASIC: _ClassVar[JobView]
    JOB_VIEW_FULL: _ClassVar[JobView]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_QUEUED: JobState
JOB_STATE_STARTING: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_RETRYING: JobState
JOB_STATE_SUCCEEDED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_CANCELLED: JobState
JOB_STATE_TIMED_OUT: JobState
JOB_STATE_EARLY_STOPPED: JobState
JOB_VIEW_UNSPECIFIED: JobView
JOB_VIEW_BASIC: JobView
JOB_VIEW_FULL: JobView

class Job(_message.Message):
    __slots__ = ("name", "display_name", "spec", "priority", "tenant", "labels", "retry_policy", "timeout", "experiment", "state", "state_reason", "attempts", "latest_checkpoint", "latest_metrics", "create_time", "start_time", "end_time", "update_time", "trial_parameters", "failure")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class TrialParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LATEST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    LATEST_METRICS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    TRIAL_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    name: str
    display_name: str
    spec: _common_pb2.TrainingSpec
    priority: int
    tenant: str
    labels: _containers.ScalarMap[str, str]
    retry_policy: _common_pb2.RetryPolicy
    timeout: _duration_pb2.Duration
    experiment: str
    state: JobState
    state_reason: str
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    latest_checkpoint: _common_pb2.Checkpoint
    latest_metrics: _common_pb2.MetricsReport
    create_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    trial_parameters: _containers.ScalarMap[str, str]
    failure: _common_pb2.Failure
    def __init__(self, name: _Optional[str] = ..., display_name: _Optional[str] = ..., spec: _Optional[_Union[_common_pb2.TrainingSpec, _Mapping]] = ..., priority: _Optional[int] = ..., tenant: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., retry_policy: _Optional[_Union[_common_pb2.RetryPolicy, _Mapping]] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., experiment: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., state_reason: _Optional[str] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., latest_checkpoint: _Optional[_Union[_common_pb2.Checkpoint, _Mapping]] = ..., latest_metrics: _Optional[_Union[_common_pb2.MetricsReport, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., trial_parameters: _Optional[_Mapping[str, str]] = ..., failure: _Optional[_Union[_common_pb2.Failure, _Mapping]] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ("number", "run", "state", "failure_reason", "resumed_from", "start_time", "end_time", "failure")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FROM_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    number: int
    run: str
    state: JobState
    failure_reason: str
    resumed_from: _common_pb2.Checkpoint
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    failure: _common_pb2.Failure
    def __init__(self, number: _Optional[int] = ..., run: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., failure_reason: _Optional[str] = ..., resumed_from: _Optional[_Union[_common_pb2.Checkpoint, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., failure: _Optional[_Union[_common_pb2.Failure, _Mapping]] = ...) -> None: ...

class JobStateChange(_message.Message):
    __slots__ = ("from_state", "to_state", "reason")
    FROM_STATE_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    from_state: JobState
    to_state: JobState
    reason: str
    def __init__(self, from_state: _Optional[_Union[JobState, str]] = ..., to_state: _Optional[_Union[JobState, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ("sequence", "time", "attempt", "state_change", "metrics", "checkpoint")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STATE_CHANGE_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    time: _timestamp_pb2.Timestamp
    attempt: int
    state_change: JobStateChange
    metrics: _common_pb2.MetricsReport
    checkpoint: _common_pb2.Checkpoint
    def __init__(self, sequence: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., attempt: _Optional[int] = ..., state_change: _Optional[_Union[JobStateChange, _Mapping]] = ..., metrics: _Optional[_Union[_common_pb2.MetricsReport, _Mapping]] = ..., checkpoint: _Optional[_Union[_common_pb2.Checkpoint, _Mapping]] = ...) -> None: ...
