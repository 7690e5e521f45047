import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from paddleray.common.v1 import common_pb2 as _common_pb2
from paddleray.exporter.v1 import model_pb2 as _model_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeploymentState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEPLOYMENT_STATE_UNSPECIFIED: _ClassVar[DeploymentState]
    DEPLOYMENT_STATE_DEPLOYING: _ClassVar[DeploymentState]
    DEPLOYMENT_STATE_HEALTHY: _ClassVar[DeploymentState]
    DEPLOYMENT_STATE_UPDATING: _ClassVar[DeploymentState]
    DEPLOYMENT_STATE_UNHEALTHY: _ClassVar[DeploymentState]
    DEPLOYMENT_STATE_DELETING: _ClassVar[DeploymentState]
DEPLOYMENT_STATE_UNSPECIFIED: DeploymentState
DEPLOYMENT_STATE_DEPLOYING: DeploymentState
DEPLOYMENT_STATE_HEALTHY: DeploymentState
DEPLOYMENT_STATE_UPDATING: DeploymentState
DEPLOYMENT_STATE_UNHEALTHY: DeploymentState
DEPLOYMENT_STATE_DELETING: DeploymentState

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

class TrafficTarget(_message.Message):
    __slots__ = ("model_version", "percent")
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    PERCENT_FIELD_NUMBER: _ClassVar[int]
    model_version: str
    percent: int
    def __init__(self, model_version: _Optional[str] = ..., percent: _Optional[int] = ...) -> None: ...

class VersionStatus(_message.Message):
    __slots__ = ("model_version", "backend", "state", "running_replicas", "target_replicas", "message", "replicas_per_node")
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RUNNING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    TARGET_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    model_version: str
    backend: _model_pb2.Backend
    state: DeploymentState
    running_replicas: int
    target_replicas: int
    message: str
    replicas_per_node: _containers.RepeatedCompositeFieldContainer[NodeReplicas]
    def __init__(self, model_version: _Optional[str] = ..., backend: _Optional[_Union[_model_pb2.Backend, str]] = ..., state: _Optional[_Union[DeploymentState, str]] = ..., running_replicas: _Optional[int] = ..., target_replicas: _Optional[int] = ..., message: _Optional[str] = ..., replicas_per_node: _Optional[_Iterable[_Union[NodeReplicas, _Mapping]]] = ...) -> None: ...

class NodeReplicas(_message.Message):
    __slots__ = ("node_id", "node_ip", "running_replicas")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_IP_FIELD_NUMBER: _ClassVar[int]
    RUNNING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    node_ip: str
    running_replicas: int
    def __init__(self, node_id: _Optional[str] = ..., node_ip: _Optional[str] = ..., running_replicas: _Optional[int] = ...) -> None: ...

class Deployment(_message.Message):
    __slots__ = ("name", "serving_name", "traffic", "backend", "predictor", "num_replicas", "autoscaling", "resources_per_replica", "batching", "model", "state", "state_reason", "endpoint", "version_statuses", "create_time", "update_time", "tenant", "direct_endpoint", "http_endpoint")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SERVING_NAME_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    PREDICTOR_FIELD_NUMBER: _ClassVar[int]
    NUM_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    AUTOSCALING_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_PER_REPLICA_FIELD_NUMBER: _ClassVar[int]
    BATCHING_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    VERSION_STATUSES_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    DIRECT_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    HTTP_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    name: str
    serving_name: str
    traffic: _containers.RepeatedCompositeFieldContainer[TrafficTarget]
    backend: _model_pb2.Backend
    predictor: _model_pb2.PredictorConfig
    num_replicas: int
    autoscaling: AutoscalingConfig
    resources_per_replica: _common_pb2.Resources
    batching: BatchingConfig
    model: str
    state: DeploymentState
    state_reason: str
    endpoint: str
    version_statuses: _containers.RepeatedCompositeFieldContainer[VersionStatus]
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    tenant: str
    direct_endpoint: str
    http_endpoint: str
    def __init__(self, name: _Optional[str] = ..., serving_name: _Optional[str] = ..., traffic: _Optional[_Iterable[_Union[TrafficTarget, _Mapping]]] = ..., backend: _Optional[_Union[_model_pb2.Backend, str]] = ..., predictor: _Optional[_Union[_model_pb2.PredictorConfig, _Mapping]] = ..., num_replicas: _Optional[int] = ..., autoscaling: _Optional[_Union[AutoscalingConfig, _Mapping]] = ..., resources_per_replica: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., batching: _Optional[_Union[BatchingConfig, _Mapping]] = ..., model: _Optional[str] = ..., state: _Optional[_Union[DeploymentState, str]] = ..., state_reason: _Optional[str] = ..., endpoint: _Optional[str] = ..., version_statuses: _Optional[_Iterable[_Union[VersionStatus, _Mapping]]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., tenant: _Optional[str] = ..., direct_endpoint: _Optional[str] = ..., http_endpoint: _Optional[str] = ...) -> None: ...
