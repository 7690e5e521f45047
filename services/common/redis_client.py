"""The services' Redis: its settings (a mixin), and the one way to connect, with the one
reconnect policy they share.

The scheduler and the exporter mix RedisSettings into their settings (PADDLERAY_<SERVICE>_REDIS_URL,
_REDIS_PASSWORD, _REDIS_USERNAME, _REDIS_TLS_CA_FILE) and connect with connect(); the local
stack probes the Redis it hands them with connect_blocking(). The password is a setting of its
own, so that it is kept out of URLs, which get logged and shown. No other module of services/
makes a Redis client (tests/unit/common/test_one_way_to_connect.py).

redis-py's `from_url` makes connections that never retry (`Retry(NoBackoff(), 0)`): after
Redis restarts, every connection in the pool is dead, and each failed the first call that
used it, long after Redis answered again (issue 21: calls after recovery got UNAVAILABLE).
Here a command that fails with a connection error is sent again on a new connection, up to
3 times with jittered backoff (0.6 s at most in all), before the error reaches the caller
(who answers UNAVAILABLE). Connection errors only: a timeout may mean the command ran.

Sending a command again is safe for what the services write: a command that ran before its
reply was lost is one whose connection broke while Redis was up; creates are deduplicated
(request_id, and a job id already taken is compared with the job being created), and every
other write is a compare-and-set that refuses a second run as a conflict, which is re-read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Self

import redis
import redis.asyncio as aioredis
from pydantic import BaseModel, Field, SecretStr, model_validator
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

RETRIES = 3


class RedisSettings(BaseModel):
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0", description="Redis holding the service's state; rediss://... for TLS. "
        "Keep the password out of it: use redis_password."
    )
    redis_password: SecretStr | None = Field(None, description="Password of redis_url's server (AUTH), if it has one.")
    redis_username: str | None = Field(None, description="ACL user of redis_password, if not 'default'.")
    redis_tls_ca_file: Path | None = Field(None, description="PEM CA that signed a rediss:// server's certificate.")

    @model_validator(mode="after")
    def _tls_needs_rediss(self) -> Self:
        if self.redis_tls_ca_file is not None and not self.redis_url.startswith("rediss://"):
            raise ValueError("redis_tls_ca_file needs a rediss:// redis_url (TLS)")
        return self

    def redis_options(self) -> dict[str, Any]:
        """Keyword arguments of redis-py's from_url beyond the URL."""
        options: dict[str, Any] = {}
        if self.redis_password is not None:
            options["password"] = self.redis_password.get_secret_value()
        if self.redis_username:
            options["username"] = self.redis_username
        if self.redis_tls_ca_file is not None:
            options["ssl_ca_certs"] = str(self.redis_tls_ca_file)
        return options

    def redis_env(self, prefix: str) -> dict[str, str]:
        """These settings as the environment of a service whose variables start with prefix."""
        env = {f"{prefix}REDIS_URL": self.redis_url}
        if self.redis_password is not None:
            env[f"{prefix}REDIS_PASSWORD"] = self.redis_password.get_secret_value()
        if self.redis_username:
            env[f"{prefix}REDIS_USERNAME"] = self.redis_username
        if self.redis_tls_ca_file is not None:
            env[f"{prefix}REDIS_TLS_CA_FILE"] = str(self.redis_tls_ca_file)
        return env


def reconnecting_retry() -> Retry:
    return Retry(ExponentialWithJitterBackoff(base=0.05, cap=0.4), RETRIES, supported_errors=(RedisConnectionError,))


def connect(settings: RedisSettings, *, max_connections: int, **options: Any) -> aioredis.Redis:
    """An asyncio client of the settings' Redis (nothing is dialled until the first command)."""
    return aioredis.Redis.from_url(settings.redis_url, max_connections=max_connections, retry=reconnecting_retry(),
                                   **settings.redis_options(), **options)


def connect_blocking(settings: RedisSettings, **options: Any) -> redis.Redis:
    """A synchronous client, for launchers and probes (no retry: a probe says what it finds)."""
    return redis.Redis.from_url(settings.redis_url, **settings.redis_options(), **options)
