"""Service configuration from environment variables and flags (pydantic-settings).

Each service subclasses ServiceSettings with its own env prefix (PADDLERAY_SCHEDULER_, ...),
so one environment can configure all three without collisions.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServiceSettings(BaseSettings):
    """Settings every gRPC service has."""

    model_config = SettingsConfigDict(env_prefix="PADDLERAY_", extra="ignore", cli_kebab_case=True)

    @classmethod
    def from_env_and_flags(cls, prog: str, argv: list[str] | None = None) -> Self:
        """Environment variables, overridden by command-line flags (--port 50051, --log-level DEBUG, ...)."""
        return cls(_cli_parse_args=sys.argv[1:] if argv is None else argv, _cli_prog_name=prog)

    host: str = Field("127.0.0.1", description="Address the gRPC server binds to.")
    port: int = Field(0, ge=0, le=65535, description="gRPC port; 0 picks a free one.")
    auth_token: str = Field(
        "", description="Bearer token required of clients, standing for an admin of the default tenant; "
        "empty (and no auth_tokens_file) disables auth."
    )
    auth_tokens_file: Path | None = Field(
        None, description="YAML or JSON file mapping bearer tokens to {tenant, role: admin | member | read-only} "
        "(a mounted Secret in Kubernetes); see docs/security.md. Re-read when it changes."
    )
    tls_cert_file: Path | None = Field(
        None, description="PEM certificate (chain) the server presents; with tls_key_file the service serves TLS only."
    )
    tls_key_file: Path | None = Field(None, description="PEM private key of tls_cert_file.")
    tls_client_ca_file: Path | None = Field(
        None, description="PEM CA bundle; when set, clients must present a certificate it signed (mTLS)."
    )
    metrics_port: int | None = Field(
        None, ge=0, le=65535, description="Prometheus /metrics port; unset disables it, 0 picks one."
    )
    log_level: str = Field("INFO", description="Python logging level.")
    log_json: bool = Field(True, description="Log one JSON object per line.")
    grace_period_s: float = Field(5.0, ge=0, description="Time in-flight RPCs get on shutdown.")
    storage_root: Path = Field(
        Path.home() / ".paddleray" / "storage",
        description="Root of checkpoints, exported models and logs (a shared FS in a cluster).",
    )
    ready_file: Path | None = Field(
        None,
        description=(
            "When set, a JSON document with the ports actually bound (gRPC and metrics) is written here, "
            "atomically, once the server serves: how a launcher that asked for port 0 learns the address."
        ),
    )

    @model_validator(mode="after")
    def _tls_files_together(self) -> Self:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together: set both to serve TLS, or neither")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError("tls_client_ca_file (mTLS) needs tls_cert_file and tls_key_file")
        return self
