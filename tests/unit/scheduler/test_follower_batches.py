"""run_events.batched: run events taken in lists, so that a follower that falls behind persists
what queued up meanwhile in one write (bench concurrency: a Redis write per metric report)."""

from __future__ import annotations

import asyncio

import pytest

from paddleray.services.scheduler.run_events import batched

pytestmark = pytest.mark.unit


async def _stream(items, error: BaseException | None = None, gate: asyncio.Event | None = None):
    for item in items:
        if gate is not None and item == "wait":
            await gate.wait()
            continue
        yield item
    if error is not None:
        raise error


async def test_a_consumer_that_keeps_up_gets_one_item_at_a_time():
    gate = asyncio.Event()
    got = []
    async for batch in batched(_stream([1, "wait", 2], gate=gate), 10):
        got.append(batch)
        gate.set()
    assert got == [[1], [2]]


async def test_what_arrived_meanwhile_comes_as_one_list_in_order_up_to_the_limit():
    got = []
    async for batch in batched(_stream(range(7)), 3):
        got.append(batch)
        await asyncio.sleep(0.05)  # slower than the stream: the reader queues ahead
    assert [item for batch in got for item in batch] == list(range(7))
    assert max(len(batch) for batch in got) == 3
    assert len(got) < 7


async def test_an_error_of_the_stream_is_raised_after_the_items_before_it():
    got = []
    with pytest.raises(ConnectionError, match="broke"):
        async for batch in batched(_stream([1, 2], ConnectionError("broke")), 10):
            got.extend(batch)
            await asyncio.sleep(0.01)
    assert got == [1, 2]


async def test_leaving_early_closes_the_stream():
    closed = asyncio.Event()

    async def endless():
        try:
            n = 0
            while True:
                n += 1
                yield n
                await asyncio.sleep(0)
        finally:
            closed.set()

    batches = batched(endless(), 4)
    async for _batch in batches:
        break
    await batches.aclose()
    assert closed.is_set()
