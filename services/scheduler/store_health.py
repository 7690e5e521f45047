"""The scheduler's store (Redis) as a dependency: errors that mean "down", and a health watcher.

While Redis cannot be reached (stopped, unreachable, or refusing our password) every RPC that
touches it answers UNAVAILABLE instead of INTERNAL with a traceback, and the service reports
NOT_SERVING until a ping succeeds again. The outage is logged once when it starts and once
when it ends, never per call, and never with the URL (it may carry a password).
"""

from __future__ import annotations

import asyncio
import logging

import redis.asyncio as aioredis
from redis import exceptions as redis_errors

from paddleray.services.common import errors

log = logging.getLogger(__name__)

# AuthenticationError (wrong or missing password) and BusyLoadingError are ConnectionErrors too.
_DOWN = (redis_errors.ConnectionError, redis_errors.TimeoutError)


def _auth_failure(exc: BaseException) -> bool:
    return isinstance(exc, redis_errors.AuthenticationError) or (
        isinstance(exc, redis_errors.ResponseError) and str(exc).startswith(("NOAUTH", "WRONGPASS"))
    )


def describe(exc: BaseException) -> str:
    """What went wrong, in words that carry no host, URL or password."""
    if _auth_failure(exc):
        return "Redis refused the scheduler's credentials"
    if isinstance(exc, redis_errors.TimeoutError):
        return "Redis did not answer in time"
    return "Redis cannot be reached"


def translate(exc: BaseException) -> errors.DomainError | None:
    if isinstance(exc, _DOWN) or _auth_failure(exc):
        return errors.Unavailable(f"the scheduler's store is unavailable ({describe(exc)}); retry later")
    if isinstance(exc, redis_errors.ReadOnlyError):
        # A replica being promoted (Sentinel or a managed failover): writes come back shortly.
        return errors.Unavailable("the scheduler's store is read-only during a failover; retry later")
    return None


def register() -> None:
    errors.register_translator(translate)


# The scheduler's loops that retry through an outage, each logging its own failed pass.
_LOOP_LOGGERS = ("paddleray.services.scheduler.dispatcher", "paddleray.services.scheduler.follower",
                 "paddleray.services.scheduler.experiments")


class _StoreDown(logging.Filter):
    """Drops the loops' records that say Redis is down: the readiness check logs the outage,
    once, instead of every loop on every pass."""

    def __init__(self, health: StoreHealth) -> None:
        super().__init__()
        self.health = health

    def filter(self, record: logging.LogRecord) -> bool:
        causes = [*(record.args if isinstance(record.args, tuple) else ()),
                  *([record.exc_info[1]] if record.exc_info else [])]
        if any(isinstance(c, _DOWN) or (isinstance(c, BaseException) and _auth_failure(c)) for c in causes):
            return False
        return True


class StoreHealth:
    """Redis' health as run_service's readiness (pinged every interval_s)."""

    def __init__(self, client: aioredis.Redis, interval_s: float = 1.0) -> None:
        self.client = client
        self.interval_s = interval_s
        self.healthy = True
        self._filter = _StoreDown(self)
        for name in _LOOP_LOGGERS:
            logging.getLogger(name).addFilter(self._filter)

    def close(self) -> None:
        for name in _LOOP_LOGGERS:
            logging.getLogger(name).removeFilter(self._filter)

    async def check(self) -> str | None:
        """None when Redis answers, else what is wrong."""
        try:
            # wait_for, not a cancelled read: a ping into a black hole must not outlive the interval.
            await asyncio.wait_for(self.client.ping(), timeout=max(self.interval_s, 0.5))
        except (TimeoutError, *_DOWN, redis_errors.ResponseError) as exc:
            return describe(exc)
        return None

    async def refresh(self) -> bool:
        """Checks once; True when the store's health changed (each change is logged once)."""
        problem = await self.check()
        if (problem is None) == self.healthy:
            return False
        if problem is not None:
            log.error("store outage: %s; reporting NOT_SERVING until it answers", problem)
        else:
            log.info("store reachable again; reporting SERVING")
        self.healthy = problem is None
        return True

    async def ready(self) -> bool:
        """run_service's readiness check."""
        await self.refresh()
        return self.healthy
