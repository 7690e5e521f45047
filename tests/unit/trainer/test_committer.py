"""BackgroundCommitter: commits off the caller's thread, reports in order, failures surfaced."""

from __future__ import annotations

import threading
import time

import pytest

from paddleray.services.trainer.committer import BackgroundCommitter

pytestmark = pytest.mark.unit


def _gated(gate: threading.Event, value: str, started: list | None = None):
    def commit() -> str:
        if started is not None:
            started.append(value)
        assert gate.wait(10), "test gate never opened"
        return value

    return commit


def test_submit_returns_while_the_commit_runs_and_reports_keep_their_order():
    out, gate = [], threading.Event()
    committer = BackgroundCommitter(out.append)
    committer.hand_over("m0")  # nothing in flight: straight to the sink
    assert out == ["m0"]
    committer.submit(_gated(gate, "c1"))
    committer.hand_over("m1")  # queued behind c1, without waiting for it
    committer.hand_over("m2")
    assert out == ["m0"], "nothing overtakes a commit in flight"
    gate.set()
    committer.flush(timeout_s=10)
    assert out == ["m0", "c1", "m1", "m2"]
    committer.hand_over("m3")
    assert out[-1] == "m3"
    committer.close(timeout_s=10)


def test_a_third_commit_waits_while_one_is_in_flight_and_one_waits():
    out, gate, started = [], threading.Event(), []
    committer = BackgroundCommitter(out.append)
    committer.submit(_gated(gate, "c1", started))
    committer.submit(_gated(gate, "c2", started))
    third_submitted = threading.Event()

    def submit_third():
        committer.submit(_gated(gate, "c3", started))
        third_submitted.set()

    threading.Thread(target=submit_third, daemon=True).start()
    assert not third_submitted.wait(0.3), "the disk sets the pace: the third commit waits for a slot"
    gate.set()
    assert third_submitted.wait(10)
    committer.close(timeout_s=10)
    assert out == ["c1", "c2", "c3"]


def test_a_failed_commit_is_raised_in_the_caller_and_later_items_are_dropped():
    out = []
    committer = BackgroundCommitter(out.append)

    def broken() -> str:
        raise OSError("No space left on device")

    committer.submit(broken)
    committer.hand_over("after")
    with pytest.raises(RuntimeError, match="checkpoint commit failed: No space left on device"):
        committer.flush(timeout_s=10)
    assert out == []
    with pytest.raises(RuntimeError, match="No space left"):
        committer.hand_over("later")
    with pytest.raises(RuntimeError, match="No space left"):
        committer.close(timeout_s=10)


def test_flush_gives_up_after_its_timeout():
    gate = threading.Event()
    committer = BackgroundCommitter(lambda _item: None)
    committer.submit(_gated(gate, "slow"))
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="1 checkpoint commit"):
        committer.flush(timeout_s=0.2)
    assert time.monotonic() - started < 5
    gate.set()
    committer.close(timeout_s=10)
