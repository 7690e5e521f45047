"""Server interceptors: bearer-token auth (with the caller's identity), error mapping, metrics.

grpc.aio interceptors cannot see a call's outcome from intercept_service alone, so each one
wraps the method handler's behavior (unary-unary, unary-stream and stream-unary, the kinds
our contracts use, and stream-stream, server reflection's; a stream-unary behavior is awaited
like a unary one, with the request iterator as its request).
"""

from __future__ import annotations

import inspect
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from grpc import aio
from redis import exceptions as redis_errors

from paddleray.services.common import errors, identity, metrics
from paddleray.services.common.credentials import Credentials

log = logging.getLogger(__name__)

UnaryBehavior = Callable[[Any, aio.ServicerContext], Awaitable[Any]]
StreamBehavior = Callable[[Any, aio.ServicerContext], AsyncIterator[Any]]

# Health checks come from load balancers and kubelets that carry no token; reflection only
# describes the public contracts (grpcurl and other languages discover them with no setup).
_PUBLIC_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.v1alpha.ServerReflection/", "/grpc.reflection.v1.ServerReflection/")


def _wrap_handler(
    handler: grpc.RpcMethodHandler | None,
    unary: Callable[[UnaryBehavior], UnaryBehavior],
    stream: Callable[[StreamBehavior], StreamBehavior],
    deserializer: Callable[[Callable[[bytes], Any] | None], Callable[[bytes], Any] | None] = lambda d: d,
) -> grpc.RpcMethodHandler | None:
    if handler is None:
        return None
    return _of_kind(handler, lambda b: unary(_as_coroutine(b)), lambda b: stream(_as_async_iterator(b)),
                    deserializer(handler.request_deserializer)) or handler


# A handler's four kinds: the attribute holding its behavior, the maker of a handler of that
# kind, and whether it answers with a stream.
_HANDLER_KINDS: tuple[tuple[str, Callable[..., grpc.RpcMethodHandler], bool], ...] = (
    ("unary_unary", grpc.unary_unary_rpc_method_handler, False),
    ("stream_unary", grpc.stream_unary_rpc_method_handler, False),
    ("unary_stream", grpc.unary_stream_rpc_method_handler, True),
    ("stream_stream", grpc.stream_stream_rpc_method_handler, True),
)


def _of_kind(
    handler: grpc.RpcMethodHandler,
    unary: Callable[[Callable[..., Any]], Callable[..., Any]],
    stream: Callable[[Callable[..., Any]], Callable[..., Any]],
    request_deserializer: Callable[[bytes], Any] | None,
) -> grpc.RpcMethodHandler | None:
    """A handler of `handler`'s kind whose behavior is `unary(its behavior)` for one response, or
    `stream(its behavior)` for a stream of them; None for a handler of no kind."""
    for kind, make, streams in _HANDLER_KINDS:
        behavior = getattr(handler, kind)
        if behavior is not None:
            return make((stream if streams else unary)(behavior), request_deserializer=request_deserializer,
                        response_serializer=handler.response_serializer)
    return None


class _Undecodable:
    """What a request that cannot be parsed (invalid UTF-8 in a string field, truncated bytes,
    nesting beyond protobuf's limit) becomes: the call then answers INVALID_ARGUMENT. grpc.aio
    would otherwise answer UNKNOWN naming the exception class and log a traceback per call."""

    def __init__(self, error: Exception) -> None:
        self.error = error


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except DecodeError as exc:
            return _Undecodable(exc)

    return deserialize


async def _decoded_stream(requests: AsyncIterator[Any], method: str) -> AsyncIterator[Any]:
    async for request in requests:
        if isinstance(request, _Undecodable):
            log.info("%s: undecodable request message (%s)", method, request.error)
            raise errors.InvalidArgument("request", f"not a valid message ({request.error})")
        yield request


async def _reject_undecodable(request: Any, method: str, context: aio.ServicerContext) -> None:
    if isinstance(request, _Undecodable):
        log.info("%s: undecodable request (%s)", method, request.error)
        await _abort(context, errors.InvalidArgument("request", f"not a valid message ({request.error})"))


async def _abort(context: aio.ServicerContext, error: errors.DomainError) -> None:
    await context.abort(error.code, error.message, trailing_metadata=errors.status_trailers(error))


def _as_coroutine(behavior: Callable[..., Any]) -> UnaryBehavior:
    # Generated base servicers answer unimplemented methods with a plain (non-async) function.
    async def call(request: Any, context: aio.ServicerContext) -> Any:
        result = behavior(request, context)
        return await result if inspect.isawaitable(result) else result

    return call


def _as_async_iterator(behavior: Callable[..., Any]) -> StreamBehavior:
    async def call(request: Any, context: aio.ServicerContext) -> AsyncIterator[Any]:
        result = behavior(request, context)
        if hasattr(result, "__aiter__"):
            async for item in result:
                yield item
        elif inspect.isawaitable(result):
            await result
        else:
            for item in result:
                yield item

    return call


class ErrorMappingInterceptor(aio.ServerInterceptor):
    """Answers an undecodable request INVALID_ARGUMENT; maps DomainError to its status, registered dependency errors (errors.register_translator)
    to theirs, and anything else to INTERNAL with a logged traceback.

    The client sees an incident id for INTERNAL, never the traceback itself.
    """

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        handler = await continuation(handler_call_details)

        async def abort_for(exc: BaseException, context: aio.ServicerContext) -> None:
            if isinstance(exc, errors.DomainError):
                await _abort(context, exc)
            if isinstance(exc, NotImplementedError):
                await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not implemented yet")
            translated = errors.translate(exc)
            if translated is not None:
                # An outage is logged once by whoever watches the dependency, not per call.
                log.debug("%s: %s (%s)", method, translated.message, type(exc).__name__)
                await _abort(context, translated)
            if isinstance(exc, redis_errors.ConnectionError | redis_errors.TimeoutError):
                # Redis down is a dependency outage the client may retry, not a bug of ours.
                await context.abort(grpc.StatusCode.UNAVAILABLE, f"Redis is unreachable: {exc}")
            incident = uuid.uuid4().hex[:12]
            log.error("unexpected error in %s (incident %s)", method, incident, exc_info=exc)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error (incident {incident}); see the server log")

        def unary(behavior: UnaryBehavior) -> UnaryBehavior:
            async def call(request: Any, context: aio.ServicerContext) -> Any:
                await _reject_undecodable(request, method, context)
                if hasattr(request, "__aiter__"):  # a client stream: each message is checked as it comes
                    request = _decoded_stream(request, method)
                try:
                    return await behavior(request, context)
                except aio.AbortError:
                    raise
                except Exception as exc:  # noqa: BLE001 - mapped to a status, never leaked
                    await abort_for(exc, context)

            return call

        def stream(behavior: StreamBehavior) -> StreamBehavior:
            async def call(request: Any, context: aio.ServicerContext) -> AsyncIterator[Any]:
                await _reject_undecodable(request, method, context)
                if hasattr(request, "__aiter__"):  # a bidirectional stream (server reflection)
                    request = _decoded_stream(request, method)
                try:
                    async for item in behavior(request, context):
                        yield item
                except aio.AbortError:
                    raise
                except Exception as exc:  # noqa: BLE001
                    await abort_for(exc, context)

            return call

        return _wrap_handler(handler, unary, stream, _tolerant)


class LocalIdentityInterceptor(aio.ServerInterceptor):
    """With auth off: runs every call as identity.LOCAL (an admin of the default tenant), said
    here once instead of by a default wherever a caller is asked for."""

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler_call_details.method.startswith(_PUBLIC_SERVICES):
            return handler  # health and reflection, as AuthInterceptor leaves them: they ask for no caller
        return _as_identity(handler, identity.LOCAL)


class AuthInterceptor(aio.ServerInterceptor):
    """Requires `authorization: Bearer <token>` on every call except health checks and
    reflection, and runs the call as the token's identity (identity.of_call())."""

    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials

    def _identify(self, metadata: Any) -> identity.Identity | None:
        for key, value in metadata or ():
            if key == "authorization":
                given = value.encode() if isinstance(value, str) else value
                scheme, _, token = given.partition(b" ")
                if scheme.lower() != b"bearer" or not token:
                    return None
                return self._credentials.identify(token.strip())
        return None

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler_call_details.method.startswith(_PUBLIC_SERVICES):
            return handler
        caller = self._identify(handler_call_details.invocation_metadata)
        if caller is None:
            return _rejecting_handler(handler)
        return _as_identity(handler, caller)


def _as_identity(handler: grpc.RpcMethodHandler | None, caller: identity.Identity) -> grpc.RpcMethodHandler | None:
    """The handler, run with caller as identity.of_call(); every kind of method is wrapped, so
    none runs without a caller by being of a kind not foreseen here."""
    if handler is None:
        return None

    def response(behavior: Callable[..., Any]) -> Callable[..., Any]:
        async def call(request_or_iterator: Any, context: aio.ServicerContext) -> Any:
            with identity.acting_as(caller):
                result = behavior(request_or_iterator, context)
                return await result if inspect.isawaitable(result) else result

        return call

    def stream(behavior: Callable[..., Any]) -> Callable[..., Any]:
        async def call(request_or_iterator: Any, context: aio.ServicerContext) -> AsyncIterator[Any]:
            # Set and never reset: a generator finalised from another context could not reset it,
            # and the call's own task (whose context this is) ends with the call.
            identity.set_current(caller)
            result = behavior(request_or_iterator, context)
            if hasattr(result, "__aiter__"):
                async for item in result:
                    yield item
            else:
                for item in await result if inspect.isawaitable(result) else result:
                    yield item

        return call

    return _of_kind(handler, response, stream, handler.request_deserializer)


def _rejecting_handler(handler: grpc.RpcMethodHandler | None) -> grpc.RpcMethodHandler | None:
    """A handler of the same kind as `handler` that answers UNAUTHENTICATED."""
    if handler is None:
        return None

    async def reject(context: aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or invalid bearer token in 'authorization' metadata")

    async def unary_response(request_or_iterator: Any, context: aio.ServicerContext) -> Any:
        await reject(context)

    async def stream_response(request_or_iterator: Any, context: aio.ServicerContext) -> AsyncIterator[Any]:
        await reject(context)
        yield  # pragma: no cover - makes this an async generator

    return _of_kind(handler, lambda _: unary_response, lambda _: stream_response, handler.request_deserializer)


class MetricsInterceptor(aio.ServerInterceptor):
    """Counts calls by method and status code, and times unary calls."""

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        handler = await continuation(handler_call_details)

        def record(code: grpc.StatusCode, started: float | None) -> None:
            metrics.GRPC_REQUESTS.labels(method=method, code=code.name).inc()
            if started is not None:
                metrics.GRPC_LATENCY.labels(method=method).observe(time.perf_counter() - started)

        def unary(behavior: UnaryBehavior) -> UnaryBehavior:
            async def call(request: Any, context: aio.ServicerContext) -> Any:
                started = time.perf_counter()
                try:
                    response = await behavior(request, context)
                except BaseException:
                    record(context.code() or grpc.StatusCode.UNKNOWN, started)
                    raise
                record(grpc.StatusCode.OK, started)
                return response

            return call

        def stream(behavior: StreamBehavior) -> StreamBehavior:
            async def call(request: Any, context: aio.ServicerContext) -> AsyncIterator[Any]:
                try:
                    async for item in behavior(request, context):
                        yield item
                except BaseException:
                    record(context.code() or grpc.StatusCode.UNKNOWN, None)
                    raise
                record(grpc.StatusCode.OK, None)

            return call

        return _wrap_handler(handler, unary, stream)
