"""A JobManager on the test's private, flushed Redis."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from paddleray.services.scheduler.jobs import JobManager
from paddleray.services.scheduler.store import JobStore


@pytest.fixture
async def manager(redis_url):
    client = aioredis.Redis.from_url(redis_url)
    yield JobManager(JobStore(client, events_cap=50), aging_s_per_priority=60.0, stop_wait_s=0.5)
    await client.aclose()


@pytest.fixture
async def raw_redis(redis_url):
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()
