"""Domain errors that carry their gRPC status code.

Domain code raises these; one interceptor (interceptors.ErrorMappingInterceptor) turns them
into statuses, so servicers never build statuses by hand and never leak a traceback. An
INVALID_ARGUMENT also carries the machine-readable google.rpc.Status of AIP-193: a
google.rpc.BadRequest with one field violation (the field's path, the rule), in the
`grpc-status-details-bin` trailer that grpcio-status's `rpc_status.from_call` and every gRPC
language's status-details helpers read.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status


class DomainError(Exception):
    """An error the client can act on; its message is shown to the client as is."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(DomainError):
    """A request field breaks a rule; the message names the field and the rule."""

    code = grpc.StatusCode.INVALID_ARGUMENT

    def __init__(self, field: str, rule: str) -> None:
        super().__init__(f"{field}: {rule}")
        self.field = field
        self.rule = rule


def status_trailers(error: DomainError) -> tuple[tuple[str, str | bytes], ...]:
    """The trailing metadata of error's rich status: a BadRequest for InvalidArgument, else none."""
    if not isinstance(error, InvalidArgument):
        return ()
    violation = error_details_pb2.BadRequest.FieldViolation(field=error.field, description=error.rule)
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.BadRequest(field_violations=[violation]))
    status = status_pb2.Status(code=error.code.value[0], message=error.message, details=[detail])
    return tuple(rpc_status.to_status(status).trailing_metadata)


class NotFound(DomainError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(DomainError):
    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(DomainError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class PermissionDenied(DomainError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(DomainError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class OutOfRange(DomainError):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unavailable(DomainError):
    code = grpc.StatusCode.UNAVAILABLE


class Aborted(DomainError):
    """A concurrent change won; the client may retry."""

    code = grpc.StatusCode.ABORTED


# Exceptions of libraries a service depends on that mean "a dependency is down", not a bug:
# a service registers how to translate them (e.g. the scheduler: Redis connection errors ->
# Unavailable), and the error-mapping interceptor answers with that instead of INTERNAL.
Translator = Callable[[BaseException], DomainError | None]
_translators: list[Translator] = []


def register_translator(translate: Translator) -> None:
    """Adds translate(exc) -> DomainError | None, tried in order for every unexpected exception."""
    if translate not in _translators:
        _translators.append(translate)


def translate(exc: BaseException) -> DomainError | None:
    for translator in _translators:
        mapped = translator(exc)
        if mapped is not None:
            return mapped
    return None
