"""Service configuration from environment variables and flags (pydantic-settings).

Each service subclasses ServiceSettings with its own env prefix (PADDLERAY_SCHEDULER_, ...),
so one environment can configure all three without collisions. A service that dials another
holds a PeerSettings field named after the peer (services/common/peers.py); its environment
names are split once, after the peer's name (PADDLERAY_SCHEDULER_TRAINER_TLS_CA_FILE is
`trainer.tls_ca_file`). A list-valued setting (StrList) takes a comma-separated list or a JSON
array; a bad value stops a service's start-up with one line naming the variable and the format
it takes (for_main), not a traceback.
"""

from __future__ import annotations

import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Self

from pydantic import BaseModel, BeforeValidator, Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict, SettingsError

from paddleray.services.common import storage
from paddleray.services.common.peers import fold_flat_peer_names

LIST_FORMAT = 'a comma-separated list (a,b) or a JSON array (["a", "b"])'


def _comma_or_json_list(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a valid JSON array ({exc.msg} at column {exc.colno})") from None
    return [item.strip() for item in text.split(",") if item.strip()]


# NoDecode: the environment's raw string reaches the validator (pydantic-settings would
# otherwise take it as JSON only).
StrList = Annotated[list[str], NoDecode, BeforeValidator(_comma_or_json_list)]


def _storage_root(value: Any) -> Any:
    return storage.check_root(str(value)) if isinstance(value, (str, Path)) else value


# A directory path or an object-store URI, canonical (common/storage.py: check_root).
StorageRoot = Annotated[str, BeforeValidator(_storage_root)]


def value_format(annotation: Any) -> str:
    """What a setting of this type takes, in words, for error messages and docs."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return value_format(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return value_format(args[0]) if len(args) == 1 else ""
    if origin is list:
        return LIST_FORMAT
    if origin is dict or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return "a JSON object"
    return {bool: "true or false", int: "an integer", float: "a number", Path: "a file path"}.get(annotation, "")


class ServiceSettings(BaseSettings):
    """Settings every gRPC service has."""

    model_config = SettingsConfigDict(env_prefix="PADDLERAY_", extra="ignore", cli_kebab_case=True,
                                      env_nested_delimiter="_", env_nested_max_split=1)

    @classmethod
    def from_env_and_flags(cls, prog: str, argv: list[str] | None = None) -> Self:
        """Environment variables, overridden by command-line flags (--port 50051, --log-level DEBUG, ...)."""
        return cls(_cli_parse_args=sys.argv[1:] if argv is None else argv, _cli_prog_name=prog)

    @classmethod
    def for_main(cls, prog: str, argv: list[str] | None = None) -> Self:
        """from_env_and_flags for a service's main(): a bad value ends the process (exit code 2)
        with one line on stderr naming each variable and the format it takes."""
        try:
            return cls.from_env_and_flags(prog, argv)
        except (ValidationError, SettingsError) as error:
            print(f"{prog}: {cls.explain(error)}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None

    @classmethod
    def explain(cls, error: ValidationError | SettingsError) -> str:
        """The error as one line: `VARIABLE: what is wrong; expected FORMAT`, per setting."""
        problems: list[tuple[tuple[int | str, ...], str]]
        if isinstance(error, SettingsError):
            match = re.search(r'field "(\w+)"', str(error))
            problems = [((match.group(1),) if match else (), "cannot be parsed")]
        else:
            problems = [(e["loc"], e["msg"].removeprefix("Value error, ")) for e in error.errors()]
        parts = []
        for loc, message in problems:
            field = str(loc[0]) if loc else ""
            info = cls.model_fields.get(field)
            if info is None:
                parts.append(message)
                continue
            annotation: Any = info.annotation
            sub = loc[1] if len(loc) > 1 and isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
            if isinstance(sub, str) and sub in annotation.model_fields:  # a peer's setting: TRAINER_ADDRESS
                field, annotation = f"{field}_{sub}", annotation.model_fields[sub].annotation
            variable = f"{cls.model_config.get('env_prefix', '')}{field}".upper()
            expected = value_format(annotation)
            parts.append(f"{variable} (--{field.replace('_', '-')}): {message}" + (f"; expected {expected}" if expected else ""))
        return "; ".join(dict.fromkeys(parts))

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
    storage_root: StorageRoot = Field(
        str(Path.home() / ".paddleray" / "storage"),
        description="Root of checkpoints, logs, exported models and packages: a directory (a shared FS in a "
        "cluster) or an object-store URI such as s3://bucket/prefix (credentials from the environment: "
        "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL; docs/storage.md).",
    )
    ready_file: Path | None = Field(
        None,
        description=(
            "When set, a JSON document with the ports actually bound (gRPC and metrics) is written here, "
            "atomically, once the server serves: how a launcher that asked for port 0 learns the address."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _flat_peer_names(cls, data: Any) -> Any:
        return fold_flat_peer_names(cls, data)

    @model_validator(mode="after")
    def _tls_files_together(self) -> Self:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together: set both to serve TLS, or neither")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError("tls_client_ca_file (mTLS) needs tls_cert_file and tls_key_file")
        return self
