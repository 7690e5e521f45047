from paddleray.common.v1 import common_pb2 as _common_pb2
from paddleray.scheduler.v1 import job_pb2 as _job_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateJobRequest(_message.Message):
    __slots__ = ("job", "job_id", "request_id")
    JOB_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    job_id: str
    request_id: str
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ..., job_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class CreateJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "states", "labels", "experiment", "tenant", "view")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    states: _containers.RepeatedScalarFieldContainer[_job_pb2.JobState]
    labels: _containers.ScalarMap[str, str]
    experiment: str
    tenant: str
    view: _job_pb2.JobView
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., states: _Optional[_Iterable[_Union[_job_pb2.JobState, str]]] = ..., labels: _Optional[_Mapping[str, str]] = ..., experiment: _Optional[str] = ..., tenant: _Optional[str] = ..., view: _Optional[_Union[_job_pb2.JobView, str]] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[_job_pb2.Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[_job_pb2.Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("name", "reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    reason: str
    def __init__(self, name: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ...) -> None: ...

class DeleteJobRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteJobResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WatchJobRequest(_message.Message):
    __slots__ = ("name", "after_sequence")
    NAME_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    after_sequence: int
    def __init__(self, name: _Optional[str] = ..., after_sequence: _Optional[int] = ...) -> None: ...

class WatchJobResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: _job_pb2.JobEvent
    def __init__(self, event: _Optional[_Union[_job_pb2.JobEvent, _Mapping]] = ...) -> None: ...

class GetJobLogsRequest(_message.Message):
    __slots__ = ("name", "attempt", "rank", "tail_lines", "follow")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    TAIL_LINES_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    name: str
    attempt: int
    rank: int
    tail_lines: int
    follow: bool
    def __init__(self, name: _Optional[str] = ..., attempt: _Optional[int] = ..., rank: _Optional[int] = ..., tail_lines: _Optional[int] = ..., follow: _Optional[bool] = ...) -> None: ...

class GetJobLogsResponse(_message.Message):
    __slots__ = ("lines",)
    LINES_FIELD_NUMBER: _ClassVar[int]
    lines: _containers.RepeatedCompositeFieldContainer[_common_pb2.LogLine]
    def __init__(self, lines: _Optional[_Iterable[_Union[_common_pb2.LogLine, _Mapping]]] = ...) -> None: ...
