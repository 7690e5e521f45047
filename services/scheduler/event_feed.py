"""EventFeed: one blocking XREAD for every reader of this process that waits for job events.

WatchJob (and the CreateJob wait for a terminal state) wait for a job's next event with a
blocking XREAD. One XREAD per waiting reader held one Redis connection per watched job: Redis
keeps ~34 KB for a blocked client (its buffers) and ~17 KB for an idle pooled one, measured
on Redis 7.0 here, which was nearly all of the "Redis bytes per running job" that `python -m
bench concurrency` reported (25-54 KB) with a WatchJob stream per run. Here the waiting readers
of a process share one XREAD over all their streams (up to MAX_STREAMS a call, rotating when
there are more), so what a watched job costs Redis is its events, not a connection.

A reader registers the stream and the last entry it has; the loop reads every registered
stream from the oldest entry any of its readers has, hands each reader the entries after its
own, and reads again. A reader that registers while a read is blocked is included in the next
one: reads block for at most BLOCK_MS, so that is the longest a new reader's first event may
wait (nothing is missed meanwhile: the read starts from the reader's own entry). Single-node
Redis, as the Lua scripts (an XREAD over many keys needs them in one slot on a cluster).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import redis.asyncio as aioredis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

BLOCK_MS = 100
MAX_STREAMS = 512
_COUNT = 500  # entries a stream gives per read, as a reader's own XREAD took
_RETRY_S = 0.2  # after a failed read, so that a Redis that is down is not asked in a tight loop

Entry = tuple[bytes, dict]


def _sequence(entry_id: bytes) -> int:
    return int(entry_id.split(b"-", 1)[0])


class EventFeed:
    def __init__(self, client: aioredis.Redis, block_ms: int = BLOCK_MS, max_streams: int = MAX_STREAMS) -> None:
        self._redis = client
        self._block_ms = block_ms
        self._max_streams = max_streams
        # stream key -> [(sequence the reader has, its future)]
        self._waiting: dict[str, list[tuple[int, asyncio.Future]]] = {}
        self._task: asyncio.Task | None = None
        self._rotation = 0

    @property
    def waiting(self) -> int:
        """Readers waiting now (for tests and metrics)."""
        return sum(len(w) for w in self._waiting.values())

    async def wait(self, stream: str, after: int, timeout_ms: int) -> list[Entry]:
        """Entries of `stream` above sequence `after`, once there are any, or [] after timeout_ms.
        A failed read raises its RedisError in every reader it was for."""
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        waiter = (after, future)
        self._waiting.setdefault(stream, []).append(waiter)
        self._ensure_reading()
        try:
            await asyncio.wait({future}, timeout=timeout_ms / 1000)
        finally:
            waiters = self._waiting.get(stream, [])
            if waiter in waiters:
                waiters.remove(waiter)
            if not waiters:
                self._waiting.pop(stream, None)
        if not future.done():
            future.cancel()
            return []
        return future.result()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _ensure_reading(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._task = loop.create_task(self._read_while_waited(), name="event-feed")

    def _streams(self) -> dict[str, str]:
        """The streams of this read, each from the oldest entry any of its readers has."""
        names = list(self._waiting)
        if len(names) > self._max_streams:
            start = self._rotation % len(names)
            names = (names[start:] + names[:start])[: self._max_streams]
            self._rotation += self._max_streams
        return {name: f"{min(after for after, _ in self._waiting[name])}-1" for name in names}

    async def _read_while_waited(self) -> None:
        while self._waiting:
            streams = self._streams()
            try:
                result = await self._redis.xread(streams, count=_COUNT, block=self._block_ms)
            except RedisError as exc:
                for name in streams:
                    for _after, future in self._waiting.get(name, ()):
                        if not future.done():
                            future.set_exception(exc)
                await asyncio.sleep(_RETRY_S)
                continue
            for name, entries in result or ():
                name = name.decode() if isinstance(name, bytes) else name
                for after, future in self._waiting.get(name, ()):
                    mine = [entry for entry in entries if _sequence(entry[0]) > after]
                    if mine and not future.done():
                        future.set_result(mine)
