"""Per-rank stdout/stderr: captured to files in the worker, read back for GetRunLogs.

The worker points fds 1 and 2 at pipes for the duration of the user call, so output of C++
code (Paddle's glog) is captured as well as Python's; a thread stamps each line with the
time it was captured and appends it to `logs/rank-<r>.<stream>.log` under the run's
directory as `<unix time>\\t<text>`.
"""

from __future__ import annotations

import contextlib
import heapq
import io
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

STREAMS = {"stdout": 1, "stderr": 2}
# GetRunLogs sends a run's lines in messages of about this much text, far below gRPC's limit.
_BATCH_BYTES = 1 << 20
_LINE_OVERHEAD_BYTES = 32  # rank, stream and timestamp fields of a LogLine message
_TAIL_BLOCK_BYTES = 1 << 16
_READ_BLOCK_BYTES = 1 << 20


@dataclass(frozen=True)
class LogLine:
    rank: int
    stream: str  # "stdout" | "stderr"
    text: str
    time: float


def log_file(log_dir: Path, rank: int, stream: str) -> Path:
    return log_dir / f"rank-{rank}.{stream}.log"


@contextlib.contextmanager
def capture_output(log_dir: Path, rank: int) -> Iterator[None]:
    """Sends this process's stdout and stderr to the rank's log files inside the block."""
    log_dir.mkdir(parents=True, exist_ok=True)
    saved: dict[int, int] = {}
    readers: list[threading.Thread] = []
    python_streams = sys.stdout, sys.stderr
    _flush_python_streams()
    try:
        for stream, fd in STREAMS.items():
            read_end, write_end = os.pipe()
            saved[fd] = os.dup(fd)
            os.dup2(write_end, fd)
            os.close(write_end)
            reader = threading.Thread(
                target=_copy_lines, args=(read_end, log_file(log_dir, rank, stream)), daemon=True
            )
            reader.start()
            readers.append(reader)
        # Python's streams may have been replaced (by Ray, by a test runner): write straight to
        # the fds, line-buffered so that a follower sees each print as it happens.
        sys.stdout, sys.stderr = (_line_writer(fd) for fd in STREAMS.values())
        yield
    finally:
        _flush_python_streams()
        sys.stdout, sys.stderr = python_streams
        for fd, original in saved.items():
            os.dup2(original, fd)  # closes the pipe's last write end: its reader sees EOF
            os.close(original)
        for reader in readers:
            reader.join(timeout=5)


def _line_writer(fd: int) -> io.TextIOWrapper:
    return io.TextIOWrapper(
        os.fdopen(fd, "wb", closefd=False), encoding="utf-8", errors="replace", line_buffering=True
    )


def _flush_python_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _copy_lines(read_end: int, path: Path) -> None:
    with os.fdopen(read_end, "rb") as pipe, open(path, "ab") as out:
        for raw in pipe:
            text = raw.rstrip(b"\n").replace(b"\t", b"    ")
            out.write(f"{time.time():.6f}\t".encode() + text + b"\n")
            out.flush()


def _parse(raw: str, rank: int, stream: str) -> LogLine:
    stamp, _, text = raw.rstrip("\n").partition("\t")
    try:
        when = float(stamp)
    except ValueError:
        when, text = 0.0, raw.rstrip("\n")
    return LogLine(rank, stream, text, when)


class LogReader:
    """Reads one run's log files incrementally: `tail` first, then whatever was appended."""

    def __init__(self, log_dir: Path, ranks: list[int]) -> None:
        self._files = [(rank, stream, log_file(log_dir, rank, stream)) for rank in ranks for stream in STREAMS]
        self._offsets: dict[Path, int] = {}

    def initial(self, tail_lines: int = 0) -> list[LogLine]:
        """Everything written so far, or the last `tail_lines` lines of each rank."""
        if tail_lines <= 0:
            return self.new_lines()
        by_rank: dict[int, list[LogLine]] = {}
        for rank, stream, path in self._files:
            # A rank's last n lines are among the last n of each of its streams: the rest of
            # a (possibly huge) file is never read.
            self._offsets[path] = _tail_offset(path, tail_lines)
            by_rank.setdefault(rank, []).extend(self._lines(rank, stream, path))
        lines: list[LogLine] = []
        for rank_lines in by_rank.values():
            lines.extend(_ordered(rank_lines)[-tail_lines:])
        return _ordered(lines)

    def new_lines(self) -> list[LogLine]:
        return list(self.stream())

    def stream(self) -> Iterator[LogLine]:
        """The complete lines appended since the last read, oldest first, read a block of each
        file at a time: memory stays bounded however large the files are."""
        # Each file is in capture order already; merging keeps file order among equal times.
        return heapq.merge(*(self._lines(rank, stream, path) for rank, stream, path in self._files), key=_capture_time)

    def _lines(self, rank: int, stream: str, path: Path) -> Iterator[LogLine]:
        while block := self._read_block(path):
            for raw in block.decode("utf-8", errors="replace").splitlines():
                yield _parse(raw, rank, stream)

    def _read_block(self, path: Path) -> bytes:
        """The next complete lines of a file (about one block); b"" when there are none.

        The file is open only during the read, so a stream left unfinished holds nothing open.
        """
        offset = self._offsets.get(path, 0)
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read(_READ_BLOCK_BYTES)
                if data and b"\n" not in data:
                    data += f.readline()  # a line longer than a block
        except FileNotFoundError:
            return b""
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits for the next read
        self._offsets[path] = offset + len(complete)
        return complete


def next_batch(lines: Iterator[LogLine], max_bytes: int = _BATCH_BYTES) -> list[LogLine]:
    """The next lines of `lines`, about max_bytes of text (one message); [] at the end."""
    batch: list[LogLine] = []
    size = 0
    for line in lines:
        batch.append(line)
        size += len(line.text) + _LINE_OVERHEAD_BYTES
        if size >= max_bytes:
            break
    return batch


def _tail_offset(path: Path, lines: int) -> int:
    """Where the last `lines` complete lines of a file start (0 when it has no more)."""
    try:
        with open(path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            position, newlines = end, 0
            while position > 0:
                step = min(_TAIL_BLOCK_BYTES, position)
                position -= step
                f.seek(position)
                block = f.read(step)
                if position + step == end:
                    block = block[: block.rfind(b"\n") + 1]  # a line still being written is not counted
                newlines += block.count(b"\n")
                if newlines > lines:
                    # The block starts with lines older than the last n: start after them.
                    cut = -1
                    for _ in range(newlines - lines):
                        cut = block.index(b"\n", cut + 1)
                    return position + cut + 1
    except FileNotFoundError:
        pass
    return 0


def _capture_time(line: LogLine) -> float:
    return line.time


def _ordered(lines: list[LogLine]) -> list[LogLine]:
    # Stable sort by capture time keeps each file's own order.
    return sorted(lines, key=_capture_time)
