"""What the SDK raises: one base class, and the kinds a caller (or the CLI's exit code) tells apart."""

from __future__ import annotations

import grpc


class ClientError(Exception):
    """Base of every error the SDK raises."""


class ConfigError(ClientError):
    """No usable connection settings, or a malformed config file / spec (the message names where)."""


class NotConfigured(ConfigError):
    """No address from arguments, environment, config file or a local stack."""


class SpecError(ConfigError):
    """A job or experiment spec file that does not parse or validate; the message is one line."""


class Unreachable(ClientError):
    """The service did not answer (UNAVAILABLE, or no answer within the deadline) after retries."""

    def __init__(self, address: str, detail: str) -> None:
        super().__init__(f"cannot reach {address}: {detail}")
        self.address = address


class ServiceError(ClientError):
    """The service answered with an error status (INVALID_ARGUMENT, NOT_FOUND, ...)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


class WaitTimeout(ClientError):
    """A wait_* helper gave up before the job / experiment ended (it keeps running)."""


def translate(error: grpc.RpcError, address: str, source: str = "") -> ClientError:
    code = error.code()
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        where = f" (address from {source})" if source else ""
        return Unreachable(address, f"{code.name}: {error.details()}{where}")
    return ServiceError(code, error.details() or "")
