"""BackgroundCommitter: rank 0's checkpoint commits off the training thread, in report order.

Committing a checkpoint (rename into place, fsync of every file and directory, manifest) is
a few ms of mostly disk waits. Done in ctx.report, it stalls the training thread, and in data
parallelism every other rank too, at its next collective. Done here, training goes on while
the disk works, and the report carrying the checkpoint is handed to the trainer once the
commit is durable, so the trainer never hears of a checkpoint that a crash could still undo.

Order is kept: a report made while commits are in flight is handed over after them (without
waiting for them: a rank reporting every step goes on). At most one commit waits behind the
one in flight, so a rank checkpointing faster than the disk takes it slows to the disk's pace
instead of piling up staged copies. A failed commit is raised in the training thread at its
next report or flush, which fails the run with the cause.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

Item = TypeVar("Item")

# One commit in flight and one waiting: enough to overlap a commit with the next epoch.
_MAX_COMMITS = 2
# Reports queued behind a commit; the worker's own report queue bounds what follows.
_MAX_QUEUED = 10_000


class CommitFailed(RuntimeError):
    """A checkpoint commit failed: the trainer's failure, raised in the training thread."""


class BackgroundCommitter(Generic[Item]):  # noqa: UP046 - Python 3.11 has no class type parameters
    def __init__(self, sink: Callable[[Item], None], name: str = "checkpoint-commit") -> None:
        self._sink = sink
        self._name = name
        self._jobs: queue.Queue[tuple[Callable[[], Item], bool] | None] = queue.Queue(_MAX_QUEUED)
        self._commit_slots = threading.BoundedSemaphore(_MAX_COMMITS)
        self._pending = 0  # jobs submitted and not yet handed over (or dropped after a failure)
        self._idle = threading.Condition()
        self._failure: BaseException | None = None
        self._thread: threading.Thread | None = None

    def submit(self, commit: Callable[[], Item]) -> None:
        """Runs commit in the background; what it returns goes to the sink after every earlier item."""
        self.raise_failure()
        self._commit_slots.acquire()  # blocks while one commit already waits: the disk sets the pace
        self._enqueue(commit, is_commit=True)

    def hand_over(self, item: Item) -> None:
        """Gives item to the sink now, or behind the commits in flight so that order is kept."""
        self.raise_failure()
        with self._idle:
            direct = self._pending == 0
        # Only the training thread submits, so nothing can be queued between the check and here.
        if direct:
            self._sink(item)
        else:
            self._enqueue(lambda: item, is_commit=False)

    def _enqueue(self, job: Callable[[], Item], is_commit: bool) -> None:
        with self._idle:
            self._pending += 1
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, daemon=True, name=self._name)
            self._thread.start()
        self._jobs.put((job, is_commit))

    def flush(self, timeout_s: float | None = None) -> None:
        """Waits until everything submitted was handed over; raises a failed commit's error."""
        with self._idle:
            if not self._idle.wait_for(lambda: self._pending == 0, timeout_s):
                raise TimeoutError(f"{self._pending} checkpoint commit(s) still in flight after {timeout_s} s")
        self.raise_failure()

    def close(self, timeout_s: float | None = None) -> None:
        """flush(), then ends the thread; the committer is not used again."""
        try:
            self.flush(timeout_s)
        finally:
            if self._thread is not None:
                self._jobs.put(None)
                self._thread = None

    def raise_failure(self) -> None:
        if self._failure is not None:
            raise CommitFailed(f"a checkpoint commit failed: {self._failure}") from self._failure

    def _work(self) -> None:
        while (entry := self._jobs.get()) is not None:
            job, is_commit = entry
            try:
                # After a failure the run is failing: later commits would only hide the cause.
                if self._failure is None:
                    self._sink(job())
            except BaseException as exc:  # noqa: BLE001 - re-raised in the training thread
                self._failure = exc
            finally:
                if is_commit:
                    self._commit_slots.release()
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()
