import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from paddleray.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DataType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DATA_TYPE_UNSPECIFIED: _ClassVar[DataType]
    DATA_TYPE_BOOL: _ClassVar[DataType]
    DATA_TYPE_INT8: _ClassVar[DataType]
    DATA_TYPE_INT16: _ClassVar[DataType]
    DATA_TYPE_INT32: _ClassVar[DataType]
    DATA_TYPE_INT64: _ClassVar[DataType]
    DATA_TYPE_UINT8: _ClassVar[DataType]
    DATA_TYPE_FP16: _ClassVar[DataType]
    DATA_TYPE_BF16: _ClassVar[DataType]
    DATA_TYPE_FP32: _ClassVar[DataType]
    DATA_TYPE_FP64: _ClassVar[DataType]

class ExportFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXPORT_FORMAT_UNSPECIFIED: _ClassVar[ExportFormat]
    EXPORT_FORMAT_PADDLE_INFERENCE: _ClassVar[ExportFormat]
    EXPORT_FORMAT_ONNX: _ClassVar[ExportFormat]

class ModelVersionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_VERSION_STATE_UNSPECIFIED: _ClassVar[ModelVersionState]
    MODEL_VERSION_STATE_READY: _ClassVar[ModelVersionState]
    MODEL_VERSION_STATE_VALIDATION_FAILED: _ClassVar[ModelVersionState]

class DeploymentState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEPLOYMENT_STATE_UNSPECIFIED: _ClassVar[DeploymentState]
    DEPLOYMENT_STATE_DEPLOYING: _ClassVar[DeploymentState]
    DEPLOYMENT_STATE_HEALTHY: _ClassVar[DeploymentState]
    DEPLOYMENT_STATE_UNHEALTHY: _ClassVar[DeploymentState]
    DEPLOYMENT_STATE_DELETING: _ClassVar[DeploymentState]
DATA_TYPE_UNSPECIFIED: DataType
DATA_TYPE_BOOL: DataType
DATA_TYPE_INT8: DataType
DATA_TYPE_INT16: DataType
DATA_TYPE_INT32: DataType
DATA_TYPE_INT64: DataType
DATA_TYPE_UINT8: DataType
DATA_TYPE_FP16: DataType
DATA_TYPE_BF16: DataType
DATA_TYPE_FP32: DataType
DATA_TYPE_FP64: DataType
EXPORT_FORMAT_UNSPECIFIED: ExportFormat
EXPORT_FORMAT_PADDLE_INFERENCE: ExportFormat
EXPORT_FORMAT_ONNX: ExportFormat
MODEL_VERSION_STATE_UNSPECIFIED: ModelVersionState
MODEL_VERSION_STATE_READY: ModelVersionState
MODEL_VERSION_STATE_VALIDATION_FAILED: ModelVersionState
DEPLOYMENT_STATE_UNSPECIFIED: DeploymentState
DEPLOYMENT_STATE_DEPLOYING: DeploymentState
DEPLOYMENT_STATE_HEALTHY: DeploymentState
DEPLOYMENT_STATE_UNHEALTHY: DeploymentState
DEPLOYMENT_STATE_DELETING: DeploymentState

class TensorSpec(_message.Message):
    __slots__ = ("name", "shape", "datatype")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATATYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    datatype: DataType
    def __init__(self, name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., datatype: _Optional[_Union[DataType, str]] = ...) -> None: ...

class Artifact(_message.Message):
    __slots__ = ("format", "uri", "size_bytes")
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    format: ExportFormat
    uri: str
    size_bytes: int
    def __init__(self, format: _Optional[_Union[ExportFormat, str]] = ..., uri: _Optional[str] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class ValidationOptions(_message.Message):
    __slots__ = ("num_samples", "atol", "rtol", "batch_size")
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    ATOL_FIELD_NUMBER: _ClassVar[int]
    RTOL_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    num_samples: int
    atol: float
    rtol: float
    batch_size: int
    def __init__(self, num_samples: _Optional[int] = ..., atol: _Optional[float] = ..., rtol: _Optional[float] = ..., batch_size: _Optional[int] = ...) -> None: ...

class ValidationResult(_message.Message):
    __slots__ = ("passed", "max_abs_error", "max_rel_error", "num_samples", "message")
    PASSED_FIELD_NUMBER: _ClassVar[int]
    MAX_ABS_ERROR_FIELD_NUMBER: _ClassVar[int]
    MAX_REL_ERROR_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    passed: bool
    max_abs_error: float
    max_rel_error: float
    num_samples: int
    message: str
    def __init__(self, passed: _Optional[bool] = ..., max_abs_error: _Optional[float] = ..., max_rel_error: _Optional[float] = ..., num_samples: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class Model(_message.Message):
    __slots__ = ("name", "display_name", "latest_version", "labels", "create_time")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    LATEST_VERSION_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    display_name: str
    latest_version: int
    labels: _containers.ScalarMap[str, str]
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., display_name: _Optional[str] = ..., latest_version: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ModelVersion(_message.Message):
    __slots__ = ("name", "source_job", "source_checkpoint", "model_builder", "model_config", "inputs", "outputs", "artifacts", "validation", "state", "create_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_JOB_FIELD_NUMBER: _ClassVar[int]
    SOURCE_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    MODEL_BUILDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_CONFIG_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    source_job: str
    source_checkpoint: _common_pb2.Checkpoint
    model_builder: str
    model_config: _struct_pb2.Struct
    inputs: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    outputs: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    artifacts: _containers.RepeatedCompositeFieldContainer[Artifact]
    validation: ValidationResult
    state: ModelVersionState
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., source_job: _Optional[str] = ..., source_checkpoint: _Optional[_Union[_common_pb2.Checkpoint, _Mapping]] = ..., model_builder: _Optional[str] = ..., model_config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., inputs: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., outputs: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., artifacts: _Optional[_Iterable[_Union[Artifact, _Mapping]]] = ..., validation: _Optional[_Union[ValidationResult, _Mapping]] = ..., state: _Optional[_Union[ModelVersionState, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class BatchingConfig(_message.Message):
    __slots__ = ("max_batch_size", "batch_wait_timeout")
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    BATCH_WAIT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    max_batch_size: int
    batch_wait_timeout: _duration_pb2.Duration
    def __init__(self, max_batch_size: _Optional[int] = ..., batch_wait_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class AutoscalingConfig(_message.Message):
    __slots__ = ("min_replicas", "max_replicas", "target_ongoing_requests")
    MIN_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MAX_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    TARGET_ONGOING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    min_replicas: int
    max_replicas: int
    target_ongoing_requests: float
    def __init__(self, min_replicas: _Optional[int] = ..., max_replicas: _Optional[int] = ..., target_ongoing_requests: _Optional[float] = ...) -> None: ...

class PredictorConfig(_message.Message):
    __slots__ = ("enable_mkldnn", "cpu_math_threads", "use_gpu", "enable_tensorrt")
    ENABLE_MKLDNN_FIELD_NUMBER: _ClassVar[int]
    CPU_MATH_THREADS_FIELD_NUMBER: _ClassVar[int]
    USE_GPU_FIELD_NUMBER: _ClassVar[int]
    ENABLE_TENSORRT_FIELD_NUMBER: _ClassVar[int]
    enable_mkldnn: bool
    cpu_math_threads: int
    use_gpu: bool
    enable_tensorrt: bool
    def __init__(self, enable_mkldnn: _Optional[bool] = ..., cpu_math_threads: _Optional[int] = ..., use_gpu: _Optional[bool] = ..., enable_tensorrt: _Optional[bool] = ...) -> None: ...

class Deployment(_message.Message):
    __slots__ = ("name", "model_version", "serving_name", "num_replicas", "autoscaling", "resources_per_replica", "batching", "predictor", "state", "state_reason", "endpoint", "create_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    SERVING_NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    AUTOSCALING_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_PER_REPLICA_FIELD_NUMBER: _ClassVar[int]
    BATCHING_FIELD_NUMBER: _ClassVar[int]
    PREDICTOR_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    model_version: str
    serving_name: str
    num_replicas: int
    autoscaling: AutoscalingConfig
    resources_per_replica: _common_pb2.Resources
    batching: BatchingConfig
    predictor: PredictorConfig
    state: DeploymentState
    state_reason: str
    endpoint: str
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., model_version: _Optional[str] = ..., serving_name: _Optional[str] = ..., num_replicas: _Optional[int] = ..., autoscaling: _Optional[_Union[AutoscalingConfig, _Mapping]] = ..., resources_per_replica: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., batching: _Optional[_Union[BatchingConfig, _Mapping]] = ..., predictor: _Optional[_Union[PredictorConfig, _Mapping]] = ..., state: _Optional[_Union[DeploymentState, str]] = ..., state_reason: _Optional[str] = ..., endpoint: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
