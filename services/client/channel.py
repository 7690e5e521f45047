"""gRPC channels with the SDK's transport policy: retries, keepalive, TLS, the bearer token.

Unary calls are retried on UNAVAILABLE by gRPC itself, through the channel's service config
(exponential backoff with jitter, done inside the gRPC core, so every stub gets it). Every
paddleray RPC is safe to resend: creates carry a request_id the scheduler deduplicates, the
others are reads or idempotent state changes. gRPC caps a retry policy at 5 attempts, which
covers a blip, not a service restart; the streaming helpers (streams.py) reconnect on top of
it for longer.
"""

from __future__ import annotations

import json
from pathlib import Path

import grpc

from paddleray.services.client.config import ConnectionConfig
from paddleray.services.client.errors import ConfigError

RETRY_POLICY = {
    "maxAttempts": 5,
    "initialBackoff": "0.2s",
    "maxBackoff": "3s",
    "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"],
}
SERVICES = (
    "paddleray.scheduler.v1.JobService",
    "paddleray.scheduler.v1.ExperimentService",
    "paddleray.exporter.v1.ExporterService",
    "paddleray.trainer.v1.TrainerService",
    "inference.GRPCInferenceService",
)


def service_config() -> str:
    return json.dumps({
        "methodConfig": [{"name": [{"service": name} for name in SERVICES], "retryPolicy": RETRY_POLICY}],
    })


def _options() -> list[tuple[str, object]]:
    return [
        ("grpc.enable_retries", 1),
        ("grpc.service_config", service_config()),
        # Long watches cross idle proxies and NATs: ping so a dead peer is noticed.
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.max_receive_message_length", 64 << 20),
        ("grpc.max_send_message_length", 64 << 20),
    ]


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).expanduser().read_bytes()
    except OSError as error:
        raise ConfigError(f"{what} {path}: {error.strerror}") from None


class _Auth(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor, grpc.StreamUnaryClientInterceptor):
    """Adds `authorization: Bearer <token>` to every call (also on plaintext channels, where
    gRPC refuses call credentials: the local stack and tests run without TLS)."""

    def __init__(self, token: str) -> None:
        self._metadata = ("authorization", f"Bearer {token}")

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        metadata = [*(details.metadata or ()), self._metadata]
        return _CallDetails(details.method, details.timeout, metadata, details.credentials,
                            details.wait_for_ready, details.compression)

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)


class _CallDetails(grpc.ClientCallDetails):
    def __init__(self, method, timeout, metadata, credentials, wait_for_ready, compression) -> None:
        self.method = method
        self.timeout = timeout
        self.metadata = metadata
        self.credentials = credentials
        self.wait_for_ready = wait_for_ready
        self.compression = compression


def open_channel(address: str, config: ConnectionConfig) -> grpc.Channel:
    """A channel to address with config's TLS and token."""
    options = _options()
    if config.tls is None:
        channel = grpc.insecure_channel(address, options=options)
    else:
        tls = config.tls
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read(tls.ca, "TLS CA file") if tls.ca else None,
            private_key=_read(tls.key, "TLS key file") if tls.key else None,
            certificate_chain=_read(tls.cert, "TLS certificate file") if tls.cert else None,
        )
        if tls.server_name:
            options.append(("grpc.ssl_target_name_override", tls.server_name))
        channel = grpc.secure_channel(address, credentials, options=options)
    if config.token:
        channel = grpc.intercept_channel(channel, _Auth(config.token))
    return channel
