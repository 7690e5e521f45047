"""Bearer tokens and the identities they stand for.

A token file (YAML or JSON; in Kubernetes a mounted Secret) maps each token to who holds it:

    "3f9c...": {tenant: team-a, role: member, name: ci-bot}
    "a71e...": {tenant: ops, role: admin}
    "c0de...": {tenant: team-a, role: read-only}

`role` is admin, member or read-only (default member); `name` only labels the holder in logs.
The single `auth_token` setting stays a shorthand for one admin token of the default tenant.
The file is re-read when it changes (a rotated Secret), at most once per second; a file that
no longer parses keeps the last good table and is logged. No message, log line or error here
ever contains a token: entries are named by their position.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from paddleray.services.common.identity import DEFAULT_TENANT, TENANT_PATTERN, Identity, Role

log = logging.getLogger(__name__)

_RELOAD_INTERVAL_S = 1.0
_MIN_TOKEN_LENGTH = 16


class TokenFileError(ValueError):
    """The token file cannot be used; the message names the entry, never the token."""


@dataclass(frozen=True)
class _Entry:
    digest: bytes
    identity: Identity


def _digest(token: bytes) -> bytes:
    # Compared as fixed-length digests, so compare_digest's time says nothing about the token.
    return hashlib.sha256(token).digest()


def parse_token_document(document: Any, source: str) -> list[tuple[str, Identity]]:
    if not isinstance(document, dict) or not document:
        raise TokenFileError(f"{source}: must map tokens to {{tenant, role}}")
    entries = []
    for position, (token, holder) in enumerate(document.items(), start=1):
        where = f"{source}: entry {position}"
        if not isinstance(token, str) or len(token) < _MIN_TOKEN_LENGTH:
            raise TokenFileError(f"{where}: the token must be a string of at least {_MIN_TOKEN_LENGTH} characters")
        if not isinstance(holder, dict):
            raise TokenFileError(f"{where}: must be a mapping with tenant and role")
        unknown = set(holder) - {"tenant", "role", "name"}
        if unknown:
            raise TokenFileError(f"{where}: unknown keys {sorted(unknown)} (allowed: tenant, role, name)")
        tenant = holder.get("tenant", DEFAULT_TENANT)
        if not isinstance(tenant, str) or not TENANT_PATTERN.fullmatch(tenant):
            raise TokenFileError(f"{where}: tenant must be 1-63 characters of [a-z0-9-], starting and ending alphanumeric")
        try:
            role = Role(holder.get("role", Role.MEMBER.value))
        except ValueError:
            raise TokenFileError(f"{where}: role must be one of {[r.value for r in Role]}") from None
        name = str(holder.get("name", f"entry-{position}"))
        entries.append((token, Identity(tenant, role, name)))
    return entries


def load_token_file(path: Path) -> list[tuple[str, Identity]]:
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise TokenFileError(f"{path}: cannot be read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        # The parser's own message can quote the offending text, which may be a token.
        raise TokenFileError(f"{path}: not valid YAML or JSON{where}") from None
    return parse_token_document(document, str(path))


class Credentials:
    """Tokens accepted by a service, and the identity of each."""

    def __init__(self, auth_token: str = "", tokens_file: Path | None = None) -> None:
        self._single = [(auth_token, Identity(DEFAULT_TENANT, Role.ADMIN, "auth-token"))] if auth_token else []
        self._file = tokens_file
        self._file_mtime: float | None = None
        self._checked_at = 0.0
        self._entries: list[_Entry] = []
        self._file_entries: list[tuple[str, Identity]] = []
        if tokens_file is not None:
            self._file_entries = load_token_file(tokens_file)  # a bad file fails start-up, loudly
            self._file_mtime = _mtime(tokens_file)
        self._rebuild()

    @classmethod
    def from_settings(cls, settings: Any) -> Credentials | None:
        """None when the settings ask for no auth (no token and no token file)."""
        tokens_file = getattr(settings, "auth_tokens_file", None)
        if not settings.auth_token and tokens_file is None:
            return None
        return cls(settings.auth_token, tokens_file)

    def _rebuild(self) -> None:
        self._entries = [_Entry(_digest(t.encode()), i) for t, i in [*self._single, *self._file_entries]]

    def _maybe_reload(self) -> None:
        now = time.monotonic()
        if self._file is None or now - self._checked_at < _RELOAD_INTERVAL_S:
            return
        self._checked_at = now
        mtime = _mtime(self._file)
        if mtime == self._file_mtime:
            return
        try:
            self._file_entries = load_token_file(self._file)
        except TokenFileError as exc:
            log.error("token file changed but cannot be used; keeping the previous tokens: %s", exc)
        else:
            log.info("token file %s reloaded (%d tokens)", self._file, len(self._file_entries))
            self._rebuild()
        self._file_mtime = mtime

    def identify(self, token: bytes) -> Identity | None:
        """The identity of token, or None; every entry is compared, so timing tells nothing."""
        self._maybe_reload()
        digest = _digest(token)
        found = None
        for entry in self._entries:
            if hmac.compare_digest(digest, entry.digest) and found is None:
                found = entry.identity
        return found


def _mtime(path: Path) -> float | None:
    try:
        return os.stat(path).st_mtime_ns / 1e9
    except OSError:
        return None
