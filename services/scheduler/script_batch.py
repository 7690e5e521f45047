"""ScriptBatcher: calls of one Lua script made together go to Redis as one pipeline."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError


class ScriptBatcher:
    """Sends the calls of one script as pipelines: one batch in flight at a time, and the
    calls made meanwhile form the next one.

    Under load, many CreateJobs arrive together; one write and one read for all of them
    costs far less than one per call (syscalls and redis-py's per-command work dominate),
    and each call still takes exactly one Redis round trip before its caller returns.
    """

    def __init__(self, client: aioredis.Redis, script) -> None:
        self.client = client
        self.script = script
        self.pending: list[tuple[list, list, asyncio.Future]] = []
        self.flushing = False
        self.tasks: set[asyncio.Task] = set()  # the loop only keeps weak references to tasks

    async def __call__(self, keys: list, args: list):
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.pending.append((keys, args, future))
        if not self.flushing:
            self.flushing = True
            loop.call_soon(self._spawn, self._drain())
        return await future

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _drain(self) -> None:
        # One batch in flight at a time: calls that arrive meanwhile form the next batch,
        # so batches grow with load instead of the number of round trips.
        try:
            while self.pending:
                await self._flush()
        finally:
            self.flushing = False

    async def _flush(self) -> None:
        batch, self.pending = self.pending, []
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                for keys, args, _ in batch:
                    pipe.evalsha(self.script.sha, len(keys), *keys, *args)
                results = await pipe.execute(raise_on_error=False)
        except Exception as exc:  # noqa: BLE001 - handed to every caller of the batch
            for *_, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (keys, args, future), result in zip(batch, results, strict=True):
            if future.done():
                continue
            if isinstance(result, NoScriptError):
                # Redis lost its script cache (restart, SCRIPT FLUSH): the script call loads it.
                self._spawn(self._single(keys, args, future))
            elif isinstance(result, Exception):
                future.set_exception(result)
            else:
                future.set_result(result)

    async def _single(self, keys: list, args: list, future: asyncio.Future) -> None:
        try:
            future.set_result(await self.script(keys=keys, args=args))
        except Exception as exc:  # noqa: BLE001
            future.set_exception(exc)
