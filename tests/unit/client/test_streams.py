"""LogCursor: a resumed log stream delivers each line once (the reconnect itself is tested e2e)."""

from __future__ import annotations

import pytest

from paddleray.common.v1 import common_pb2
from paddleray.services.client.streams import LogCursor

pytestmark = pytest.mark.unit


def _line(rank: int, nanos: int, text: str) -> common_pb2.LogLine:
    line = common_pb2.LogLine(rank=rank, text=text)
    line.time.FromNanoseconds(nanos)
    return line


def test_a_reopened_stream_skips_what_was_delivered_per_rank():
    first = [_line(0, 1, "a"), _line(1, 1, "x"), _line(0, 2, "b"), _line(0, 2, "b2")]
    cursor = LogCursor()
    assert all(cursor.fresh(line) for line in first)
    cursor.reopen()
    again = [*first, _line(0, 2, "b3"), _line(1, 3, "y"), _line(0, 4, "c")]
    assert [line.text for line in again if cursor.fresh(line)] == ["b3", "y", "c"]
    cursor.reopen()
    assert [line.text for line in [*again, _line(0, 5, "d")] if cursor.fresh(line)] == ["d"]
