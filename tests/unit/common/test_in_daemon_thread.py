"""in_daemon_thread: a blocking Ray call off the event loop, and what it made freed when its
caller gave up waiting (a placement group or actors created after the cluster was lost)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from paddleray.services.common import ray_connection
from paddleray.services.common.ray_connection import calls_returned, in_daemon_thread, start_daemon_thread

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


def test_calls_returned_waits_for_the_calls_in_flight_and_says_how_many_still_run():
    release = threading.Event()

    async def scenario():
        waiting = asyncio.ensure_future(in_daemon_thread(lambda: release.wait(10)))
        await asyncio.sleep(0.05)
        assert await calls_returned(0.2) == 1, "a blocked call is waited for only up to the bound"
        release.set()
        assert await calls_returned(10) == 0
        assert await waiting is True

    asyncio.run(scenario())


def test_a_started_daemon_thread_is_in_flight_until_it_ends():
    release = threading.Event()
    thread = start_daemon_thread(release.wait, "test-thread", (10,))
    assert thread.daemon and thread.name == "test-thread"
    assert asyncio.run(calls_returned(0.1)) == 1
    release.set()
    assert asyncio.run(calls_returned(10)) == 0


def test_ray_is_shut_down_only_after_the_calls_in_flight_returned(monkeypatch):
    """close() and a lost cluster's reconnect: a call must not return into a driver shut down
    under it (ray.shutdown replaced by a recorder: the order is what is checked)."""
    release = threading.Event()
    order: list[str] = []

    def blocked() -> None:
        release.wait(10)
        order.append("call returned")

    monkeypatch.setattr(ray_connection, "_shutdown_quietly", lambda: order.append("ray.shutdown"))

    async def scenario():
        call = asyncio.ensure_future(in_daemon_thread(blocked))
        await asyncio.sleep(0.05)
        shutting = asyncio.ensure_future(ray_connection._shut_down_after_calls("the cluster"))
        await asyncio.sleep(0.3)
        assert order == [], "shut down while a call was in flight"
        release.set()
        await asyncio.wait_for(shutting, 10)
        await call

    asyncio.run(scenario())
    assert order == ["call returned", "ray.shutdown"]


def test_a_call_that_never_returns_is_abandoned_after_the_bound(monkeypatch):
    release = threading.Event()
    shut = []
    monkeypatch.setattr(ray_connection, "QUIESCE_S", 0.2)
    monkeypatch.setattr(ray_connection, "_shutdown_quietly", lambda: shut.append(True))

    async def scenario():
        asyncio.ensure_future(in_daemon_thread(lambda: release.wait(10)))
        await asyncio.sleep(0.05)
        await asyncio.wait_for(ray_connection._shut_down_after_calls("the lost cluster"), 5)

    asyncio.run(scenario())
    assert shut == [True]
    release.set()
