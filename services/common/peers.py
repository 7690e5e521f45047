"""How one service dials another: the peer's address, the caller's own credential, and TLS.

One settings type for every service-to-service client (the scheduler's client of the trainer,
the exporter's of the scheduler). A service holds one field per peer, named after it
(`SchedulerSettings.trainer`, `ExporterSettings.scheduler`), subclassing PeerSettings for the
peer's default address and deadline. The environment names stay flat, the peer's name then
the setting: PADDLERAY_SCHEDULER_TRAINER_ADDRESS, ..._TRAINER_AUTH_TOKEN, ..._TRAINER_TLS_CA_FILE
(ServiceSettings splits an environment name once, after the peer's name); as keyword arguments
the same flat names are accepted (`SchedulerSettings(trainer_address=...)`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Self

from grpc import aio
from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from paddleray.services.common.channels import open_channel


class PeerSettings(BaseModel):
    """A peer service's address and how to reach it; subclasses set the default address."""

    # A mistyped setting (PADDLERAY_SCHEDULER_TRAINER_TLS_CA=...) is an error, not ignored.
    model_config = ConfigDict(extra="forbid")

    address: str = Field("", description="host:port of the peer service.")
    auth_token: SecretStr = Field(
        SecretStr(""), description="This service's own bearer token at the peer, if the peer requires tokens."
    )
    tls_ca_file: Path | None = Field(None, description="PEM CA that signed the peer's certificate; set to dial over TLS.")
    tls_cert_file: Path | None = Field(None, description="Client certificate, for a peer that requires mTLS.")
    tls_key_file: Path | None = Field(None, description="Private key of tls_cert_file.")
    tls_server_name: str | None = Field(
        None, description="Name to check the peer's certificate against, when address is not one it names."
    )
    rpc_timeout_s: float = Field(10.0, gt=0, description="Deadline of unary calls to the peer.")

    @model_validator(mode="after")
    def _client_certificate_whole(self) -> Self:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together: set both for mTLS, or neither")
        return self

    def dial(self, options: list[tuple[str, Any]] | None = None) -> aio.Channel:
        """A grpc.aio channel to the peer (create it on the event loop that uses it)."""
        client_cert = (self.tls_cert_file, self.tls_key_file) if self.tls_cert_file and self.tls_key_file else None
        return open_channel(self.address, tls_ca=self.tls_ca_file, client_cert=client_cert,
                            token=self.auth_token.get_secret_value() or None, server_name=self.tls_server_name,
                            options=options or ())


def fold_flat_peer_names(model: type[BaseModel], data: Any) -> Any:
    """`trainer_address=...` as `trainer={"address": ...}`, for each PeerSettings field of model."""
    if not isinstance(data, dict):
        return data
    for name, field in model.model_fields.items():
        peer = field.annotation
        if not (isinstance(peer, type) and issubclass(peer, PeerSettings)):
            continue
        flat = {f"{name}_{key}": key for key in peer.model_fields if f"{name}_{key}" in data}
        if not flat:
            continue
        given = data.get(name) or {}
        nested = given.model_dump(exclude_unset=True) if isinstance(given, BaseModel) else dict(given)
        data = {k: v for k, v in data.items() if k not in flat} | {
            name: {**nested, **{key: data[flat_name] for flat_name, key in flat.items()}}}
    return data
