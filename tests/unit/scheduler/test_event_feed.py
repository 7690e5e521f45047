"""EventFeed: the waiting readers of events share one blocking XREAD, so a watched job costs
Redis its events and not a connection (bench concurrency: ~34 KB per blocked client)."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from paddleray.services.scheduler.event_feed import EventFeed

pytestmark = pytest.mark.unit


def _ids(entries) -> list[bytes]:
    return [entry_id for entry_id, _data in entries]


async def test_many_waiting_readers_share_one_connection_and_each_gets_its_own_entries(raw_redis):
    feed = EventFeed(raw_redis)
    readers = [asyncio.create_task(feed.wait(f"s{i}", 0, 5000)) for i in range(100)]
    while feed.waiting < 100:
        await asyncio.sleep(0.01)
    info = await raw_redis.info("clients")
    # One blocked read for the 100 readers (Redis counts the connection being read, not readers).
    assert info["blocked_clients"] <= 1
    for i in range(100):
        await raw_redis.xadd(f"s{i}", {"e": f"{i}"}, id="1-1")
    results = await asyncio.gather(*readers)
    assert [r[0][1][b"e"] for r in results] == [f"{i}".encode() for i in range(100)]
    assert feed.waiting == 0
    await feed.close()


async def test_readers_of_one_stream_get_what_is_after_their_own_entry(raw_redis):
    feed = EventFeed(raw_redis)
    for seq in (1, 2):
        await raw_redis.xadd("one", {"e": "x"}, id=f"{seq}-1")
    # The first reader has nothing yet: it gets both entries at once, without waiting.
    assert _ids(await feed.wait("one", 0, 2000)) == [b"1-1", b"2-1"]
    late = asyncio.create_task(feed.wait("one", 2, 5000))
    behind = asyncio.create_task(feed.wait("one", 1, 5000))
    assert _ids(await behind) == [b"2-1"]
    await raw_redis.xadd("one", {"e": "x"}, id="3-1")
    assert _ids(await late) == [b"3-1"]
    await feed.close()


async def test_a_reader_gets_nothing_after_its_timeout_and_is_forgotten(raw_redis):
    feed = EventFeed(raw_redis, block_ms=50)
    assert await feed.wait("quiet", 0, 150) == []
    assert feed.waiting == 0
    await feed.close()


async def test_more_streams_than_one_read_takes_are_all_served(raw_redis):
    feed = EventFeed(raw_redis, block_ms=20, max_streams=8)
    readers = [asyncio.create_task(feed.wait(f"r{i}", 0, 10_000)) for i in range(30)]
    while feed.waiting < 30:
        await asyncio.sleep(0.01)
    for i in range(30):
        await raw_redis.xadd(f"r{i}", {"e": "x"}, id="1-1")
    assert all(_ids(r) == [b"1-1"] for r in await asyncio.gather(*readers))
    await feed.close()


async def test_a_failed_read_is_raised_in_the_readers_it_was_for(redis_url):
    client = aioredis.Redis.from_url(redis_url)
    await client.set("not-a-stream", "x")  # XREAD of a key of another type fails: WRONGTYPE
    feed = EventFeed(client)
    with pytest.raises(aioredis.ResponseError, match="WRONGTYPE"):
        await feed.wait("not-a-stream", 0, 2000)
    await feed.close()
    await client.aclose()
