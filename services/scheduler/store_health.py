"""The scheduler's store (Redis) as a dependency: errors that mean "down" answer UNAVAILABLE,
and the health watcher of common/store_health.py over the scheduler's loops.

While Redis cannot be reached (stopped, unreachable, or refusing our password) every RPC that
touches it answers UNAVAILABLE instead of INTERNAL with a traceback, and the service reports
NOT_SERVING until a ping succeeds again; the outage is logged once when it starts and once
when it ends, without the URL.
"""

from __future__ import annotations

import redis.asyncio as aioredis
from redis import exceptions as redis_errors

from paddleray.services.common import errors
from paddleray.services.common import store_health as common

# The scheduler's loops that retry through an outage, each logging its own failed pass.
_LOOP_LOGGERS = ("paddleray.services.scheduler.dispatcher", "paddleray.services.scheduler.follower",
                 "paddleray.services.scheduler.experiments", "paddleray.services.scheduler.experiment_trials")


def translate(exc: BaseException) -> errors.DomainError | None:
    if common.is_down(exc):
        return errors.Unavailable(f"the scheduler's store is unavailable ({common.describe(exc, 'scheduler')}); "
                                  "retry later")
    if isinstance(exc, redis_errors.ReadOnlyError):
        # A replica being promoted (Sentinel or a managed failover): writes come back shortly.
        return errors.Unavailable("the scheduler's store is read-only during a failover; retry later")
    return None


def register() -> None:
    errors.register_translator(translate)


class StoreHealth(common.StoreHealth):
    def __init__(self, client: aioredis.Redis, interval_s: float = 1.0) -> None:
        super().__init__(client, interval_s, service="scheduler", loop_loggers=_LOOP_LOGGERS)
