"""Server streams that survive a dropped connection: WatchJob and GetJobLogs.

A watch resumes with after_sequence = the last sequence delivered, so a reader sees every
event exactly once, in order, across a scheduler restart. GetJobLogs has no sequence numbers;
a resumed read asks for the same attempt from its beginning and skips, per rank, what it
already delivered (lines up to the last delivered one's capture time, and the lines already
delivered at exactly that time).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import grpc

from paddleray.common.v1 import common_pb2
from paddleray.services.client.errors import Unreachable, translate

T = TypeVar("T")


@dataclass(frozen=True)
class Reconnect:
    """How long a stream keeps trying to come back: exponential backoff, bounded in total."""

    initial_backoff_s: float = 0.2
    max_backoff_s: float = 5.0
    multiplier: float = 2.0
    # Consecutive time without a working stream before Unreachable is raised.
    give_up_after_s: float = 120.0


def resuming(
    open_stream: Callable[[], Iterable[T]], address: str, policy: Reconnect, on_item: Callable[[T], bool] | None = None,
) -> Iterator[T]:
    """Items of open_stream(), reopened after UNAVAILABLE until it ends normally.

    open_stream is called again for each reconnect and must itself ask for "after what I have";
    on_item, when given, returns False for an item to drop (already delivered).
    """
    backoff = policy.initial_backoff_s
    failing_since: float | None = None
    while True:
        try:
            for item in open_stream():
                failing_since, backoff = None, policy.initial_backoff_s
                if on_item is None or on_item(item):
                    yield item
            return
        except grpc.RpcError as error:
            translated = translate(error, address)
            if not isinstance(translated, Unreachable) or error.code() != grpc.StatusCode.UNAVAILABLE:
                raise translated from None
            now = time.monotonic()
            failing_since = failing_since or now
            if now - failing_since >= policy.give_up_after_s:
                raise translated from None
            time.sleep(backoff)
            backoff = min(backoff * policy.multiplier, policy.max_backoff_s)


class LogCursor:
    """Per rank: the capture time of the last delivered line and the texts delivered at it."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[int, list[str]]] = {}
        self._skip: dict[int, tuple[int, list[str]]] = {}

    def fresh(self, line: common_pb2.LogLine) -> bool:
        """Whether line is new; records it as delivered when it is."""
        stamp = line.time.ToNanoseconds()
        skip = self._skip.get(line.rank)
        if skip is not None:
            skip_stamp, texts = skip
            if stamp < skip_stamp:
                return False
            if stamp == skip_stamp and line.text in texts:
                texts.remove(line.text)
                return False
            del self._skip[line.rank]
        last = self._last.get(line.rank)
        if last is not None and last[0] == stamp:
            last[1].append(line.text)
        else:
            self._last[line.rank] = (stamp, [line.text])
        return True

    def reopen(self) -> None:
        """Before a reopened stream: skip what was delivered."""
        self._skip = {rank: (stamp, list(texts)) for rank, (stamp, texts) in self._last.items()}
