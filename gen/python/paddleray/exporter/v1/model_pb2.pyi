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

class Backend(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BACKEND_UNSPECIFIED: _ClassVar[Backend]
    BACKEND_PADDLE_INFERENCE: _ClassVar[Backend]
    BACKEND_ONNX_RUNTIME: _ClassVar[Backend]

class ModelVersionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_VERSION_STATE_UNSPECIFIED: _ClassVar[ModelVersionState]
    MODEL_VERSION_STATE_EXPORTING: _ClassVar[ModelVersionState]
    MODEL_VERSION_STATE_VALIDATING: _ClassVar[ModelVersionState]
    MODEL_VERSION_STATE_READY: _ClassVar[ModelVersionState]
    MODEL_VERSION_STATE_VALIDATION_FAILED: _ClassVar[ModelVersionState]
    MODEL_VERSION_STATE_FAILED: _ClassVar[ModelVersionState]
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
BACKEND_UNSPECIFIED: Backend
BACKEND_PADDLE_INFERENCE: Backend
BACKEND_ONNX_RUNTIME: Backend
MODEL_VERSION_STATE_UNSPECIFIED: ModelVersionState
MODEL_VERSION_STATE_EXPORTING: ModelVersionState
MODEL_VERSION_STATE_VALIDATING: ModelVersionState
MODEL_VERSION_STATE_READY: ModelVersionState
MODEL_VERSION_STATE_VALIDATION_FAILED: ModelVersionState
MODEL_VERSION_STATE_FAILED: ModelVersionState

class TensorSpec(_message.Message):
    __slots__ = ("name", "shape", "datatype")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATATYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    datatype: DataType
    def __init__(self, name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., datatype: _Optional[_Union[DataType, str]] = ...) -> None: ...

class TensorValue(_message.Message):
    __slots__ = ("name", "shape", "raw_contents")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    RAW_CONTENTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    raw_contents: bytes
    def __init__(self, name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., raw_contents: _Optional[bytes] = ...) -> None: ...

class Artifact(_message.Message):
    __slots__ = ("format", "uri", "size_bytes")
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    format: ExportFormat
    uri: str
    size_bytes: int
    def __init__(self, format: _Optional[_Union[ExportFormat, str]] = ..., uri: _Optional[str] = ..., size_bytes: _Optional[int] = ...) -> None: ...

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

class ValidationOptions(_message.Message):
    __slots__ = ("num_samples", "atol", "rtol", "batch_size", "sample_inputs", "predictor", "dynamic_sizes")
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    ATOL_FIELD_NUMBER: _ClassVar[int]
    RTOL_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_INPUTS_FIELD_NUMBER: _ClassVar[int]
    PREDICTOR_FIELD_NUMBER: _ClassVar[int]
    DYNAMIC_SIZES_FIELD_NUMBER: _ClassVar[int]
    num_samples: int
    atol: float
    rtol: float
    batch_size: int
    sample_inputs: _containers.RepeatedCompositeFieldContainer[TensorValue]
    predictor: PredictorConfig
    dynamic_sizes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, num_samples: _Optional[int] = ..., atol: _Optional[float] = ..., rtol: _Optional[float] = ..., batch_size: _Optional[int] = ..., sample_inputs: _Optional[_Iterable[_Union[TensorValue, _Mapping]]] = ..., predictor: _Optional[_Union[PredictorConfig, _Mapping]] = ..., dynamic_sizes: _Optional[_Iterable[int]] = ...) -> None: ...

class SampleValidation(_message.Message):
    __slots__ = ("inputs", "passed", "max_abs_error", "max_rel_error")
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    MAX_ABS_ERROR_FIELD_NUMBER: _ClassVar[int]
    MAX_REL_ERROR_FIELD_NUMBER: _ClassVar[int]
    inputs: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    passed: bool
    max_abs_error: float
    max_rel_error: float
    def __init__(self, inputs: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., passed: _Optional[bool] = ..., max_abs_error: _Optional[float] = ..., max_rel_error: _Optional[float] = ...) -> None: ...

class BackendValidation(_message.Message):
    __slots__ = ("backend", "passed", "max_abs_error", "max_rel_error", "median_latency", "message", "samples")
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    MAX_ABS_ERROR_FIELD_NUMBER: _ClassVar[int]
    MAX_REL_ERROR_FIELD_NUMBER: _ClassVar[int]
    MEDIAN_LATENCY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    backend: Backend
    passed: bool
    max_abs_error: float
    max_rel_error: float
    median_latency: _duration_pb2.Duration
    message: str
    samples: _containers.RepeatedCompositeFieldContainer[SampleValidation]
    def __init__(self, backend: _Optional[_Union[Backend, str]] = ..., passed: _Optional[bool] = ..., max_abs_error: _Optional[float] = ..., max_rel_error: _Optional[float] = ..., median_latency: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., message: _Optional[str] = ..., samples: _Optional[_Iterable[_Union[SampleValidation, _Mapping]]] = ...) -> None: ...

class ValidationResult(_message.Message):
    __slots__ = ("passed", "num_samples", "atol", "rtol", "backends")
    PASSED_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    ATOL_FIELD_NUMBER: _ClassVar[int]
    RTOL_FIELD_NUMBER: _ClassVar[int]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    passed: bool
    num_samples: int
    atol: float
    rtol: float
    backends: _containers.RepeatedCompositeFieldContainer[BackendValidation]
    def __init__(self, passed: _Optional[bool] = ..., num_samples: _Optional[int] = ..., atol: _Optional[float] = ..., rtol: _Optional[float] = ..., backends: _Optional[_Iterable[_Union[BackendValidation, _Mapping]]] = ...) -> None: ...

class Model(_message.Message):
    __slots__ = ("name", "display_name", "latest_version", "labels", "create_time", "update_time", "tenant")
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
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    name: str
    display_name: str
    latest_version: int
    labels: _containers.ScalarMap[str, str]
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    tenant: str
    def __init__(self, name: _Optional[str] = ..., display_name: _Optional[str] = ..., latest_version: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., tenant: _Optional[str] = ...) -> None: ...

class ModelVersion(_message.Message):
    __slots__ = ("name", "source_job", "source_checkpoint", "source_job_metrics", "model_builder", "model_config", "inputs", "outputs", "artifacts", "validation", "state", "state_reason", "create_time", "update_time", "failure", "tenant", "metadata")
    class SourceJobMetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_JOB_FIELD_NUMBER: _ClassVar[int]
    SOURCE_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_JOB_METRICS_FIELD_NUMBER: _ClassVar[int]
    MODEL_BUILDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_CONFIG_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    source_job: str
    source_checkpoint: _common_pb2.Checkpoint
    source_job_metrics: _containers.ScalarMap[str, float]
    model_builder: str
    model_config: _struct_pb2.Struct
    inputs: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    outputs: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    artifacts: _containers.RepeatedCompositeFieldContainer[Artifact]
    validation: ValidationResult
    state: ModelVersionState
    state_reason: str
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    failure: _common_pb2.Failure
    tenant: str
    metadata: _struct_pb2.Struct
    def __init__(self, name: _Optional[str] = ..., source_job: _Optional[str] = ..., source_checkpoint: _Optional[_Union[_common_pb2.Checkpoint, _Mapping]] = ..., source_job_metrics: _Optional[_Mapping[str, float]] = ..., model_builder: _Optional[str] = ..., model_config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., inputs: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., outputs: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., artifacts: _Optional[_Iterable[_Union[Artifact, _Mapping]]] = ..., validation: _Optional[_Union[ValidationResult, _Mapping]] = ..., state: _Optional[_Union[ModelVersionState, str]] = ..., state_reason: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., failure: _Optional[_Union[_common_pb2.Failure, _Mapping]] = ..., tenant: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...
