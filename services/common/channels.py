"""Channels to paddleray services, plaintext or TLS (optionally mTLS), with a bearer token.

Every gRPC client in services/ dials through here (service-to-service clients through
peers.PeerSettings: the scheduler's trainer client, the exporter's scheduler client; the local
stack's health checks, a replica's probe of its port, the CLI and SDK), so TLS and tokens work
the same everywhere; tests/unit/common/test_one_way_to_connect.py fails on a channel made elsewhere:

    channel = open_channel("trainer:50052", tls_ca="ca.pem", client_cert=("me.pem", "me.key"),
                           token="...")          # grpc.aio channel
    channel = open_blocking_channel(...)         # the same, as a synchronous grpc.Channel

TLS is on when a CA (`tls_ca`, a path or PEM bytes) or a client certificate is given, or
with `tls=True` (then the system's roots verify the server). `token` is sent as
`authorization: Bearer <token>` on every call. `server_name` overrides the name the server's
certificate is checked against (when dialling an address the certificate does not name).
The server side, `server_credentials`, is what create_server uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import grpc
from grpc import aio

PemSource = str | Path | bytes
KEEPALIVE = [("grpc.keepalive_time_ms", 30_000)]


def read_pem(source: PemSource | None) -> bytes | None:
    if source is None or isinstance(source, bytes):
        return source
    return Path(source).read_bytes()


def channel_credentials(
    tls_ca: PemSource | None = None, client_cert: tuple[PemSource, PemSource] | None = None
) -> grpc.ChannelCredentials:
    cert, key = (read_pem(client_cert[0]), read_pem(client_cert[1])) if client_cert else (None, None)
    return grpc.ssl_channel_credentials(root_certificates=read_pem(tls_ca), private_key=key, certificate_chain=cert)


def server_credentials(cert_file: Path, key_file: Path, client_ca_file: Path | None = None) -> grpc.ServerCredentials:
    """TLS with the service's certificate; with a client CA, clients must present a certificate it signed."""
    return grpc.ssl_server_credentials(
        [(key_file.read_bytes(), cert_file.read_bytes())],
        root_certificates=client_ca_file.read_bytes() if client_ca_file else None,
        require_client_auth=client_ca_file is not None,
    )


def _options(options: Sequence[tuple[str, Any]], server_name: str | None) -> list[tuple[str, Any]]:
    extra = [("grpc.ssl_target_name_override", server_name)] if server_name else []
    given = {key for key, _ in options}
    return [*(o for o in KEEPALIVE if o[0] not in given), *options, *extra]


def _uses_tls(tls: bool | None, tls_ca: PemSource | None, client_cert: object) -> bool:
    return bool(tls) or tls_ca is not None or client_cert is not None


def open_channel(
    address: str, tls_ca: PemSource | None = None, client_cert: tuple[PemSource, PemSource] | None = None,
    token: str | None = None, *, tls: bool | None = None, server_name: str | None = None,
    options: Sequence[tuple[str, Any]] = (),
) -> aio.Channel:
    """A grpc.aio channel (create it on the event loop that uses it)."""
    interceptors = [_AioBearer(token), _AioBearerStream(token)] if token else None
    if _uses_tls(tls, tls_ca, client_cert):
        return aio.secure_channel(address, channel_credentials(tls_ca, client_cert), _options(options, server_name),
                                  interceptors=interceptors)
    return aio.insecure_channel(address, _options(options, None), interceptors=interceptors)


def open_blocking_channel(
    address: str, tls_ca: PemSource | None = None, client_cert: tuple[PemSource, PemSource] | None = None,
    token: str | None = None, *, tls: bool | None = None, server_name: str | None = None,
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.Channel:
    """A synchronous grpc.Channel, for command-line tools and health probes."""
    if _uses_tls(tls, tls_ca, client_cert):
        channel = grpc.secure_channel(address, channel_credentials(tls_ca, client_cert), _options(options, server_name))
    else:
        channel = grpc.insecure_channel(address, _options(options, None))
    return grpc.intercept_channel(channel, _BlockingBearer(token)) if token else channel


def _with_token(metadata: Any, token: str) -> list[tuple[str, str]]:
    kept = [(k, v) for k, v in (metadata or ()) if k != "authorization"]
    return [*kept, ("authorization", f"Bearer {token}")]


class _AioBearer(aio.UnaryUnaryClientInterceptor):
    def __init__(self, token: str) -> None:
        self._token = token

    async def intercept_unary_unary(self, continuation, client_call_details, request):
        return await continuation(_aio_details(client_call_details, self._token), request)


class _AioBearerStream(aio.UnaryStreamClientInterceptor):
    def __init__(self, token: str) -> None:
        self._token = token

    async def intercept_unary_stream(self, continuation, client_call_details, request):
        return await continuation(_aio_details(client_call_details, self._token), request)


def _aio_details(details: aio.ClientCallDetails, token: str) -> aio.ClientCallDetails:
    return aio.ClientCallDetails(details.method, details.timeout, _with_token(details.metadata, token),
                                 details.credentials, details.wait_for_ready)


class _Details(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: bool | None
    compression: Any


class _BlockingBearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                      grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    def __init__(self, token: str) -> None:
        self._token = token

    def _details(self, details: grpc.ClientCallDetails) -> _Details:
        return _Details(details.method, details.timeout, _with_token(details.metadata, self._token),
                        details.credentials, getattr(details, "wait_for_ready", None),
                        getattr(details, "compression", None))

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)
