"""in_daemon_thread: a blocking Ray call off the event loop, and what it made freed when its
caller gave up waiting (a placement group or actors created after the cluster was lost)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from paddleray.services.common.ray_connection import in_daemon_thread, wait_for_calls_in_flight

pytestmark = pytest.mark.unit


def test_the_result_and_the_error_reach_the_caller_and_nothing_is_abandoned():
    abandoned = []

    async def scenario():
        assert await in_daemon_thread(lambda: threading.current_thread().daemon, abandoned.append) is True
        with pytest.raises(ZeroDivisionError):
            await in_daemon_thread(lambda: 1 / 0, abandoned.append)

    asyncio.run(scenario())
    assert abandoned == []


def test_a_result_that_comes_after_the_caller_was_cancelled_is_handed_to_on_abandoned():
    release, freed = threading.Event(), threading.Event()
    abandoned = []

    def on_abandoned(result):
        abandoned.append(result)
        freed.set()

    async def scenario():
        waiting = asyncio.ensure_future(in_daemon_thread(lambda: release.wait(10) and "placement group", on_abandoned))
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release.set()  # the blocked call returns now, with nobody awaiting it
        assert await asyncio.to_thread(freed.wait, 10)

    asyncio.run(scenario())
    assert abandoned == ["placement group"]


def test_a_result_that_comes_after_the_loop_closed_is_still_freed():
    release, freed = threading.Event(), threading.Event()

    async def scenario():
        asyncio.ensure_future(in_daemon_thread(lambda: release.wait(10) and "actors", lambda _: freed.set()))
        await asyncio.sleep(0.05)

    asyncio.run(scenario())  # cancels the waiting task and closes the loop
    release.set()
    assert freed.wait(10)


def testwait_for_calls_in_flight_waits_for_the_calls_in_flight_and_says_how_many_still_run():
    release = threading.Event()

    async def scenario():
        waiting = asyncio.ensure_future(in_daemon_thread(lambda: release.wait(10)))
        await asyncio.sleep(0.05)
        assert await asyncio.to_thread(wait_for_calls_in_flight, 0.2) == 1, "a blocked call is waited for only up to the bound"
        release.set()
        assert await asyncio.to_thread(wait_for_calls_in_flight, 10) == 0
        assert await waiting is True

    asyncio.run(scenario())
