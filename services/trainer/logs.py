"""Per-rank stdout/stderr: captured to files in the worker, read back for GetRunLogs.

The worker points fds 1 and 2 at pipes for the duration of the user call, so output of C++
code (Paddle's glog) is captured as well as Python's; a thread stamps each line with the
time it was captured and appends it to `logs/rank-<r>.<stream>.log` under the run's
directory as `<unix time>\\t<text>`.

On an object-store storage root, which has no appends, the files are written on the rank's node
and uploaded every UPLOAD_INTERVAL_S while they grow and once more at the end of the call, so
GetRunLogs (which reads through common/storage.py on either root) follows a run's output with
that delay. A log goes up in parts of PART_BYTES (part 0 under the log's own name, part k as
`<name>.<k>`; every part but the last holds exactly PART_BYTES), and a round uploads only the
parts that grew: a full part once, the open one again while it grows. A round costs at most
about one part whatever the log's size, where uploading the whole file each round cost the
square of it over a run (a 100 MB log grown over an hour: ~90 GB uploaded). A reader maps an
offset to its part (`_Parted`); a log of one object (a directory root, or uploaded whole by an
older trainer) is its own single part.
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

from paddleray.services.common.storage import Storage

STREAMS = {"stdout": 1, "stderr": 2}
# GetRunLogs sends a run's lines in messages of about this much text, far below gRPC's limit.
_BATCH_BYTES = 1 << 20
_LINE_OVERHEAD_BYTES = 32  # rank, stream and timestamp fields of a LogLine message
_TAIL_BLOCK_BYTES = 1 << 16
_READ_BLOCK_BYTES = 1 << 20
UPLOAD_INTERVAL_S = 2.0
PART_BYTES = 8 << 20


@dataclass(frozen=True)
class LogLine:
    rank: int
    stream: str  # "stdout" | "stderr"
    text: str
    time: float


def log_file(log_dir: Path, rank: int, stream: str) -> Path:
    return log_dir / f"rank-{rank}.{stream}.log"


@contextlib.contextmanager
def capture_output(log_dir: Path, rank: int, mirror: str | None = None) -> Iterator[None]:
    """Sends this process's stdout and stderr to the rank's log files inside the block; with
    `mirror` (a URI), the files are uploaded there as they grow and at the end."""
    log_dir.mkdir(parents=True, exist_ok=True)
    uploader = _Uploader(log_dir, rank, mirror) if mirror else None
    try:
        with _captured(log_dir, rank):
            yield
    finally:
        if uploader is not None:
            uploader.close()


class _Uploader:
    """Uploads a rank's log files to an object store whenever they grew, from a thread."""

    def __init__(self, log_dir: Path, rank: int, mirror: str) -> None:
        self._storage = Storage.for_root(mirror)
        self._files = [log_file(log_dir, rank, stream) for stream in STREAMS]
        self._uploaded: dict[Path, int] = {}  # bytes of each file on the store
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="paddleray-log-upload", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._done.wait(UPLOAD_INTERVAL_S):
            with contextlib.suppress(OSError):  # the next round or the last upload retries it
                self.upload()

    def upload(self) -> None:
        for path in self._files:
            with contextlib.suppress(FileNotFoundError), open(path, "rb") as f:
                size, uploaded = os.fstat(f.fileno()).st_size, self._uploaded.get(path)
                if size == uploaded:
                    continue
                # From the part holding the first byte not uploaded (an empty file: part 0).
                for part in range((uploaded or 0) // PART_BYTES, max(size - 1, 0) // PART_BYTES + 1):
                    f.seek(part * PART_BYTES)
                    data = f.read(PART_BYTES)  # the file may have grown: never past the part
                    self._storage.write_atomically(part_name(path.name, part), data)
                    self._uploaded[path] = part * PART_BYTES + len(data)

    def close(self) -> None:
        self._done.set()
        self._thread.join(timeout=30)
        self.upload()  # the last lines; an error here is the run's to see


def part_name(name: str, part: int) -> str:
    """The object holding part `part` of a log uploaded in parts (see the module's docstring)."""
    return name if part == 0 else f"{name}.{part}"


class _Parted:
    """One log file as a reader sees it: a file, or its parts on an object store."""

    def __init__(self, storage: Storage, name: str, names: set[str] | None = None) -> None:
        """names: the log directory's entries, if listed already (one listing for every file)."""
        self.storage, self.name = storage, name
        names = set(storage.list_dir("")) if names is None else names
        self.parts = 0
        while part_name(name, self.parts) in names:
            self.parts += 1

    def size(self) -> int | None:
        if not self.parts:
            return None
        last = self.storage.size(part_name(self.name, self.parts - 1))
        return None if last is None else (self.parts - 1) * PART_BYTES + last

    def read_range(self, offset: int, length: int) -> bytes:
        """At most length bytes from offset, within one part (b"" past the end)."""
        if not self.parts:
            raise FileNotFoundError(self.name)
        part = min(offset // PART_BYTES, self.parts - 1)  # the last part holds the rest
        return self.storage.read_range(part_name(self.name, part), offset - part * PART_BYTES, length)


@contextlib.contextmanager
def _captured(log_dir: Path, rank: int) -> Iterator[None]:
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

    def __init__(self, log_dir: Path | str, ranks: list[int]) -> None:
        self._storage = Storage.for_root(log_dir)
        self._files = [(rank, stream, log_file(Path(), rank, stream)) for rank in ranks for stream in STREAMS]
        self._offsets: dict[Path, int] = {}

    def initial(self, tail_lines: int = 0) -> list[LogLine]:
        """Everything written so far, or the last `tail_lines` lines of each rank."""
        if tail_lines <= 0:
            return self.new_lines()
        by_rank: dict[int, list[LogLine]] = {}
        for rank, stream, path in self._files:
            # A rank's last n lines are among the last n of each of its streams: the rest of
            # a (possibly huge) file is never read.
            self._offsets[path] = _tail_offset(_Parted(self._storage, path.name), tail_lines)
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
        # Listed once a read: a part added meanwhile waits for the next.
        names = set(self._storage.list_dir(""))
        return heapq.merge(*(self._lines(rank, stream, path, names) for rank, stream, path in self._files),
                           key=_capture_time)

    def _lines(self, rank: int, stream: str, path: Path, names: set[str] | None = None) -> Iterator[LogLine]:
        log = _Parted(self._storage, path.name, names)
        while block := self._read_block(log, path):
            for raw in block.decode("utf-8", errors="replace").splitlines():
                yield _parse(raw, rank, stream)

    def _read_block(self, log: _Parted, path: Path) -> bytes:
        """The next complete lines of a file (about one block); b"" when there are none.

        The file is open only during the read, so a stream left unfinished holds nothing open.
        """
        offset = self._offsets.get(path, 0)
        try:
            data = log.read_range(offset, _READ_BLOCK_BYTES)
            while data and b"\n" not in data:  # a line longer than a block (or than a part's rest)
                more = log.read_range(offset + len(data), _READ_BLOCK_BYTES)
                if not more:
                    break
                data += more
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


def _tail_offset(log: _Parted, lines: int) -> int:
    """Where the last `lines` complete lines of a file start (0 when it has no more)."""
    end = log.size()
    if end is None:
        return 0
    position, newlines = end, 0
    while position > 0:
        # Within one part: a block read never spans two.
        step = min(_TAIL_BLOCK_BYTES, position - (position - 1) // PART_BYTES * PART_BYTES)
        position -= step
        try:
            block = log.read_range(position, step)
        except FileNotFoundError:
            return 0
        if position + step == end:
            block = block[: block.rfind(b"\n") + 1]  # a line still being written is not counted
        newlines += block.count(b"\n")
        if newlines > lines:
            # The block starts with lines older than the last n: start after them.
            cut = -1
            for _ in range(newlines - lines):
                cut = block.index(b"\n", cut + 1)
            return position + cut + 1
    return 0


def _capture_time(line: LogLine) -> float:
    return line.time


def _ordered(lines: list[LogLine]) -> list[LogLine]:
    # Stable sort by capture time keeps each file's own order.
    return sorted(lines, key=_capture_time)
