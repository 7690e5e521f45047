"""A service's Redis as a dependency: which errors mean "down", and a health watcher that
logs an outage once.

While Redis cannot be reached (stopped, unreachable, or refusing the credentials) the service
reports NOT_SERVING until a ping succeeds again. The outage is logged once when it starts and
once when it ends, never per call or per pass of a loop, and never with the URL (it may carry
a password): the loops that retry through an outage (their loggers are named at
construction) drop their records of it while this watcher is installed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

import redis.asyncio as aioredis
from redis import exceptions as redis_errors

log = logging.getLogger(__name__)

# AuthenticationError (wrong or missing password) and BusyLoadingError are ConnectionErrors too.
DOWN = (redis_errors.ConnectionError, redis_errors.TimeoutError)


def auth_failure(exc: BaseException) -> bool:
    return isinstance(exc, redis_errors.AuthenticationError) or (
        isinstance(exc, redis_errors.ResponseError) and str(exc).startswith(("NOAUTH", "WRONGPASS"))
    )


def is_down(exc: BaseException) -> bool:
    """An error that says Redis is away, not a bug."""
    return isinstance(exc, DOWN) or auth_failure(exc)


def describe(exc: BaseException, service: str) -> str:
    """What went wrong, in words that carry no host, URL or password."""
    if auth_failure(exc):
        return f"Redis refused the {service}'s credentials"
    if isinstance(exc, redis_errors.TimeoutError):
        return "Redis did not answer in time"
    return "Redis cannot be reached"


class _StoreDown(logging.Filter):
    """Drops the loops' records that say Redis is down: the watcher logs the outage, once,
    instead of every loop on every pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        causes = [*(record.args if isinstance(record.args, tuple) else ()),
                  *([record.exc_info[1]] if record.exc_info else [])]
        return not any(isinstance(c, BaseException) and is_down(c) for c in causes)


class StoreHealth:
    """Redis' health as run_service's readiness (pinged every interval_s)."""

    def __init__(self, client: aioredis.Redis, interval_s: float, *, service: str,
                 loop_loggers: Iterable[str]) -> None:
        self.client = client
        self.interval_s = interval_s
        self.service = service
        self.healthy = True
        self._loop_loggers = tuple(loop_loggers)
        self._filter = _StoreDown()
        for name in self._loop_loggers:
            logging.getLogger(name).addFilter(self._filter)

    def close(self) -> None:
        for name in self._loop_loggers:
            logging.getLogger(name).removeFilter(self._filter)

    async def check(self) -> str | None:
        """None when Redis answers, else what is wrong."""
        try:
            # wait_for, not a cancelled read: a ping into a black hole must not outlive the interval.
            await asyncio.wait_for(self.client.ping(), timeout=max(self.interval_s, 0.5))
        except (TimeoutError, *DOWN, redis_errors.ResponseError) as exc:
            return describe(exc, self.service)
        return None

    async def refresh(self) -> bool:
        """Checks once; True when the store's health changed (each change is logged once)."""
        problem = await self.check()
        if (problem is None) == self.healthy:
            return False
        if problem is not None:
            log.error("%s store outage: %s; reporting NOT_SERVING until it answers", self.service, problem)
        else:
            log.info("%s store reachable again; reporting SERVING", self.service)
        self.healthy = problem is None
        return True

    async def ready(self) -> bool:
        """run_service's readiness check."""
        await self.refresh()
        return self.healthy
