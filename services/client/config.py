"""Where the services are and how to reach them: arguments, environment, config file, local stack.

Resolution, first match wins per setting (as `kubectl` and `ray job submit --address` do):
1. explicit arguments (the CLI's `--address`, `--token`, `--tls-ca`, ...);
2. environment: PADDLERAY_ADDRESS, PADDLERAY_EXPORTER_ADDRESS, PADDLERAY_INFERENCE_ADDRESS,
   PADDLERAY_TOKEN, PADDLERAY_TLS_CA, PADDLERAY_TLS_CERT, PADDLERAY_TLS_KEY,
   PADDLERAY_TLS_SERVER_NAME;
3. the config file (PADDLERAY_CONFIG, default ~/.config/paddleray/config.yaml): the context
   named by the argument or PADDLERAY_CONTEXT, else the file's `current-context`;
4. the local stack's state file: the given state dir, else `.paddleray/stack/state.json` in
   the working directory or the nearest parent that has one (so the CLI finds the stack that
   `paddleray up` started from anywhere inside the project).

Config file:

    current-context: prod
    contexts:
      prod:
        address: scheduler.example.com:443     # JobService + ExperimentService
        exporter_address: exporter.example.com:443   # defaults to address
        inference_address: infer.example.com:443     # the v2 inference endpoint
        token_file: ~/.config/paddleray/prod.token   # or token: ..., or token_env: VAR
        tls_ca: ~/.config/paddleray/ca.pem           # TLS on when any tls_* is set, or tls: true
      local:
        state_dir: ~/src/project/.paddleray/stack
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from paddleray.services.client.errors import ConfigError, NotConfigured

DEFAULT_CONFIG_FILE = Path("~/.config/paddleray/config.yaml")
STATE_DIR = Path(".paddleray") / "stack"
_CONTEXT_KEYS = {
    "address", "exporter_address", "inference_address", "token", "token_file", "token_env",
    "tls", "tls_ca", "tls_cert", "tls_key", "tls_server_name", "state_dir",
}
_ENV = {
    "address": "PADDLERAY_ADDRESS",
    "exporter_address": "PADDLERAY_EXPORTER_ADDRESS",
    "inference_address": "PADDLERAY_INFERENCE_ADDRESS",
    "token": "PADDLERAY_TOKEN",
    "tls_ca": "PADDLERAY_TLS_CA",
    "tls_cert": "PADDLERAY_TLS_CERT",
    "tls_key": "PADDLERAY_TLS_KEY",
    "tls_server_name": "PADDLERAY_TLS_SERVER_NAME",
}


@dataclass(frozen=True)
class TlsConfig:
    """PEM files: the CA that signs the servers' certificates, and a client pair for mTLS."""

    ca: str = ""
    cert: str = ""
    key: str = ""
    server_name: str = ""


@dataclass(frozen=True)
class ConnectionConfig:
    address: str
    exporter_address: str = ""
    inference_address: str = ""
    token: str = ""
    tls: TlsConfig | None = None
    # Where the settings came from, for error messages ("no scheduler at X (from PADDLERAY_ADDRESS)").
    source: str = "arguments"

    @property
    def exporter(self) -> str:
        return self.exporter_address or self.address


def resolve(
    address: str | None = None,
    token: str | None = None,
    tls_ca: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    tls_server_name: str | None = None,
    exporter_address: str | None = None,
    inference_address: str | None = None,
    context: str | None = None,
    config_file: str | os.PathLike | None = None,
    state_dir: str | os.PathLike | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> ConnectionConfig:
    """The connection settings by the precedence in the module docstring; ConfigError if none."""
    environ: Mapping[str, str] = os.environ if env is None else env
    given = {
        "address": address, "token": token, "tls_ca": tls_ca, "tls_cert": tls_cert, "tls_key": tls_key,
        "tls_server_name": tls_server_name, "exporter_address": exporter_address,
        "inference_address": inference_address,
    }
    settings: dict[str, Any] = {k: v for k, v in given.items() if v}
    sources = ["arguments"] if settings else []
    from_env = {k: environ[var] for k, var in _ENV.items() if environ.get(var) and k not in settings}
    if from_env:
        settings.update(from_env)
        sources.append("environment")
    context = context or environ.get("PADDLERAY_CONTEXT") or None
    path = Path(config_file or environ.get("PADDLERAY_CONFIG") or DEFAULT_CONFIG_FILE).expanduser()
    file_settings = _context_settings(path, context, explicit=bool(config_file or context or environ.get("PADDLERAY_CONFIG")))
    if file_settings:
        state_dir = state_dir or file_settings.pop("state_dir", None)
        added = {k: v for k, v in file_settings.items() if k not in settings}
        settings.update(added)
        if added:
            sources.append(f"context in {path}")
    if "address" not in settings or "exporter_address" not in settings:
        stack = _stack_addresses(Path(state_dir).expanduser() if state_dir else None, cwd or Path.cwd())
        if stack is not None:
            stack_file, addresses = stack
            added = {k: v for k, v in addresses.items() if v and k not in settings}
            settings.update(added)
            if added:
                sources.append(f"local stack {stack_file}")
        elif state_dir:
            raise ConfigError(f"no local stack state in {state_dir} (start one with `paddleray up`)")
    if "address" not in settings:
        raise NotConfigured(
            "no scheduler address: pass --address or set PADDLERAY_ADDRESS, add a context to "
            f"{DEFAULT_CONFIG_FILE}, or start a local stack with `paddleray up`"
        )
    return _build(settings, ", ".join(sources))


def _build(settings: dict[str, Any], source: str) -> ConnectionConfig:
    tls_keys = ("tls_ca", "tls_cert", "tls_key", "tls_server_name")
    tls = None
    if settings.get("tls") or any(settings.get(k) for k in tls_keys):
        tls = TlsConfig(
            ca=str(settings.get("tls_ca") or ""), cert=str(settings.get("tls_cert") or ""),
            key=str(settings.get("tls_key") or ""), server_name=str(settings.get("tls_server_name") or ""),
        )
        if bool(tls.cert) != bool(tls.key):
            raise ConfigError("TLS client certificate and key go together: set both tls_cert and tls_key, or neither")
    return ConnectionConfig(
        address=str(settings["address"]), exporter_address=str(settings.get("exporter_address") or ""),
        inference_address=str(settings.get("inference_address") or ""), token=str(settings.get("token") or ""),
        tls=tls, source=source,
    )


def _context_settings(path: Path, context: str | None, explicit: bool) -> dict[str, Any] | None:
    if not path.exists():
        if explicit and (context or path != DEFAULT_CONFIG_FILE.expanduser()):
            raise ConfigError(f"{path}: config file not found")
        return None
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: not valid YAML ({getattr(error, 'problem', None) or error})") from None
    if not isinstance(data, dict) or not isinstance(data.get("contexts", {}), dict):
        raise ConfigError(f"{path}: expected a mapping with `contexts: {{name: {{address: ...}}}}`")
    name = context or data.get("current-context")
    if not name:
        return None
    contexts = data.get("contexts") or {}
    if name not in contexts:
        raise ConfigError(f"{path}: no context {name!r} (contexts: {', '.join(sorted(contexts)) or 'none'})")
    entry = contexts[name] or {}
    if not isinstance(entry, dict):
        raise ConfigError(f"{path}: contexts.{name} must be a mapping")
    unknown = set(entry) - _CONTEXT_KEYS
    if unknown:
        raise ConfigError(f"{path}: contexts.{name}: unknown key(s) {', '.join(sorted(unknown))}")
    settings = {k: v for k, v in entry.items() if k not in ("token_file", "token_env")}
    for key in ("tls_ca", "tls_cert", "tls_key", "state_dir"):
        if settings.get(key):
            settings[key] = str(Path(str(settings[key])).expanduser())
    if entry.get("token_file"):
        token_path = Path(str(entry["token_file"])).expanduser()
        try:
            settings["token"] = token_path.read_text().strip()
        except OSError as error:
            raise ConfigError(f"{path}: contexts.{name}.token_file: {error.strerror}: {token_path}") from None
    if entry.get("token_env"):
        variable = str(entry["token_env"])
        if not os.environ.get(variable):
            # Calling on without the token would answer UNAUTHENTICATED far from the cause.
            raise ConfigError(f"{path}: contexts.{name}.token_env: the variable {variable} is not set (or empty)")
        settings["token"] = os.environ[variable]
    return settings


def context_state_dir(context: str | None = None, config_file: str | os.PathLike | None = None) -> Path | None:
    """The state_dir of the config file's context (the named one, else PADDLERAY_CONTEXT, else
    current-context), if it has one."""
    context = context or os.environ.get("PADDLERAY_CONTEXT") or None
    path = Path(config_file or os.environ.get("PADDLERAY_CONFIG") or DEFAULT_CONFIG_FILE).expanduser()
    settings = _context_settings(path, context, explicit=bool(config_file or context or os.environ.get("PADDLERAY_CONFIG")))
    state_dir = (settings or {}).get("state_dir")
    return Path(state_dir) if state_dir else None


def find_state_file(start: Path) -> Path | None:
    """`.paddleray/stack/state.json` in start or its nearest parent that has one."""
    for directory in (start, *start.parents):
        candidate = directory / STATE_DIR / "state.json"
        if candidate.is_file():
            return candidate
    return None


def _stack_addresses(state_dir: Path | None, cwd: Path) -> tuple[Path, dict[str, str]] | None:
    path = state_dir / "state.json" if state_dir else find_state_file(cwd.resolve())
    if path is None or not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text())
        services = raw["services"]
        return path, {
            # A stack started with TLS records the CA of its certificate.
            "tls_ca": raw.get("tls_ca", ""),
            "address": services["scheduler"]["address"],
            "exporter_address": services.get("exporter", {}).get("address", ""),
            "inference_address": services.get("inference", {}).get("address", ""),
        }
    except (ValueError, KeyError, TypeError) as error:
        raise ConfigError(f"{path}: not a paddleray stack state file ({error})") from None
