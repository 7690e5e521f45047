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
from paddleray.services.common.channels import open_blocking_channel

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


def open_channel(address: str, config: ConnectionConfig) -> grpc.Channel:
    """A channel to address with config's TLS and token (common.channels dials; this adds the
    SDK's retry and message-size options and reads the configured files with clear errors)."""
    tls = config.tls
    if tls is None:
        return open_blocking_channel(address, token=config.token or None, options=_options())
    if bool(tls.cert) != bool(tls.key):
        raise ConfigError("a TLS client certificate and its key go together: give both or neither")
    return open_blocking_channel(
        address,
        tls_ca=_read(tls.ca, "TLS CA file") if tls.ca else None,
        client_cert=(_read(tls.cert, "TLS certificate file"), _read(tls.key, "TLS key file")) if tls.cert else None,
        token=config.token or None,
        tls=True,
        server_name=tls.server_name or None,
        options=_options(),
    )
