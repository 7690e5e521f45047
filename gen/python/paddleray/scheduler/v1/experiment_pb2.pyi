import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from paddleray.common.v1 import common_pb2 as _common_pb2
from paddleray.scheduler.v1 import job_pb2 as _job_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExperimentState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXPERIMENT_STATE_UNSPECIFIED: _ClassVar[ExperimentState]
    EXPERIMENT_STATE_RUNNING: _ClassVar[ExperimentState]
    EXPERIMENT_STATE_SUCCEEDED: _ClassVar[ExperimentState]
    EXPERIMENT_STATE_FAILED: _ClassVar[ExperimentState]
    EXPERIMENT_STATE_CANCELLED: _ClassVar[ExperimentState]

class SearchAlgorithm(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEARCH_ALGORITHM_UNSPECIFIED: _ClassVar[SearchAlgorithm]
    SEARCH_ALGORITHM_GRID: _ClassVar[SearchAlgorithm]
    SEARCH_ALGORITHM_RANDOM: _ClassVar[SearchAlgorithm]
EXPERIMENT_STATE_UNSPECIFIED: ExperimentState
EXPERIMENT_STATE_RUNNING: ExperimentState
EXPERIMENT_STATE_SUCCEEDED: ExperimentState
EXPERIMENT_STATE_FAILED: ExperimentState
EXPERIMENT_STATE_CANCELLED: ExperimentState
SEARCH_ALGORITHM_UNSPECIFIED: SearchAlgorithm
SEARCH_ALGORITHM_GRID: SearchAlgorithm
SEARCH_ALGORITHM_RANDOM: SearchAlgorithm

class GridSearch(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Value]
    def __init__(self, values: _Optional[_Iterable[_Union[_struct_pb2.Value, _Mapping]]] = ...) -> None: ...

class Choice(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Value]
    def __init__(self, values: _Optional[_Iterable[_Union[_struct_pb2.Value, _Mapping]]] = ...) -> None: ...

class Uniform(_message.Message):
    __slots__ = ("low", "high")
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    low: float
    high: float
    def __init__(self, low: _Optional[float] = ..., high: _Optional[float] = ...) -> None: ...

class LogUniform(_message.Message):
    __slots__ = ("low", "high")
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    low: float
    high: float
    def __init__(self, low: _Optional[float] = ..., high: _Optional[float] = ...) -> None: ...

class RandInt(_message.Message):
    __slots__ = ("low", "high")
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    low: int
    high: int
    def __init__(self, low: _Optional[int] = ..., high: _Optional[int] = ...) -> None: ...

class ParameterDistribution(_message.Message):
    __slots__ = ("grid", "choice", "uniform", "log_uniform", "randint")
    GRID_FIELD_NUMBER: _ClassVar[int]
    CHOICE_FIELD_NUMBER: _ClassVar[int]
    UNIFORM_FIELD_NUMBER: _ClassVar[int]
    LOG_UNIFORM_FIELD_NUMBER: _ClassVar[int]
    RANDINT_FIELD_NUMBER: _ClassVar[int]
    grid: GridSearch
    choice: Choice
    uniform: Uniform
    log_uniform: LogUniform
    randint: RandInt
    def __init__(self, grid: _Optional[_Union[GridSearch, _Mapping]] = ..., choice: _Optional[_Union[Choice, _Mapping]] = ..., uniform: _Optional[_Union[Uniform, _Mapping]] = ..., log_uniform: _Optional[_Union[LogUniform, _Mapping]] = ..., randint: _Optional[_Union[RandInt, _Mapping]] = ...) -> None: ...

class SearchSpace(_message.Message):
    __slots__ = ("parameters",)
    class ParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ParameterDistribution
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ParameterDistribution, _Mapping]] = ...) -> None: ...
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    parameters: _containers.MessageMap[str, ParameterDistribution]
    def __init__(self, parameters: _Optional[_Mapping[str, ParameterDistribution]] = ...) -> None: ...

class AshaPolicy(_message.Message):
    __slots__ = ("time_attr", "max_t", "grace_period", "reduction_factor")
    TIME_ATTR_FIELD_NUMBER: _ClassVar[int]
    MAX_T_FIELD_NUMBER: _ClassVar[int]
    GRACE_PERIOD_FIELD_NUMBER: _ClassVar[int]
    REDUCTION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    time_attr: str
    max_t: int
    grace_period: int
    reduction_factor: float
    def __init__(self, time_attr: _Optional[str] = ..., max_t: _Optional[int] = ..., grace_period: _Optional[int] = ..., reduction_factor: _Optional[float] = ...) -> None: ...

class EarlyStoppingPolicy(_message.Message):
    __slots__ = ("asha",)
    ASHA_FIELD_NUMBER: _ClassVar[int]
    asha: AshaPolicy
    def __init__(self, asha: _Optional[_Union[AshaPolicy, _Mapping]] = ...) -> None: ...

class TrialStateCount(_message.Message):
    __slots__ = ("state", "count")
    STATE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    state: _job_pb2.JobState
    count: int
    def __init__(self, state: _Optional[_Union[_job_pb2.JobState, str]] = ..., count: _Optional[int] = ...) -> None: ...

class BestTrial(_message.Message):
    __slots__ = ("job", "metric_value", "parameters", "checkpoint")
    JOB_FIELD_NUMBER: _ClassVar[int]
    METRIC_VALUE_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    job: str
    metric_value: float
    parameters: _struct_pb2.Struct
    checkpoint: _common_pb2.Checkpoint
    def __init__(self, job: _Optional[str] = ..., metric_value: _Optional[float] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., checkpoint: _Optional[_Union[_common_pb2.Checkpoint, _Mapping]] = ...) -> None: ...

class Experiment(_message.Message):
    __slots__ = ("name", "display_name", "trial_template", "search_space", "algorithm", "num_samples", "max_concurrent_trials", "metric", "mode", "early_stopping", "seed", "labels", "state", "state_reason", "total_trials", "trials_by_state", "best_trial", "create_time", "end_time")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    TRIAL_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    SEARCH_SPACE_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_TRIALS_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    EARLY_STOPPING_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TRIALS_FIELD_NUMBER: _ClassVar[int]
    TRIALS_BY_STATE_FIELD_NUMBER: _ClassVar[int]
    BEST_TRIAL_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    display_name: str
    trial_template: _job_pb2.Job
    search_space: SearchSpace
    algorithm: SearchAlgorithm
    num_samples: int
    max_concurrent_trials: int
    metric: str
    mode: _common_pb2.MetricMode
    early_stopping: EarlyStoppingPolicy
    seed: int
    labels: _containers.ScalarMap[str, str]
    state: ExperimentState
    state_reason: str
    total_trials: int
    trials_by_state: _containers.RepeatedCompositeFieldContainer[TrialStateCount]
    best_trial: BestTrial
    create_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., display_name: _Optional[str] = ..., trial_template: _Optional[_Union[_job_pb2.Job, _Mapping]] = ..., search_space: _Optional[_Union[SearchSpace, _Mapping]] = ..., algorithm: _Optional[_Union[SearchAlgorithm, str]] = ..., num_samples: _Optional[int] = ..., max_concurrent_trials: _Optional[int] = ..., metric: _Optional[str] = ..., mode: _Optional[_Union[_common_pb2.MetricMode, str]] = ..., early_stopping: _Optional[_Union[EarlyStoppingPolicy, _Mapping]] = ..., seed: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., state: _Optional[_Union[ExperimentState, str]] = ..., state_reason: _Optional[str] = ..., total_trials: _Optional[int] = ..., trials_by_state: _Optional[_Iterable[_Union[TrialStateCount, _Mapping]]] = ..., best_trial: _Optional[_Union[BestTrial, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
