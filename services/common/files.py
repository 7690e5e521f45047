"""Durable file writes on the shared storage root: atomic replace and fsync, for every service.

A reader of the storage root (a trainer resuming a run, a Serve replica loading a version, the
scheduler checking an init_from) takes a file's presence as a promise that it is whole. So a
file that marks completion (a checkpoint's or an export's manifest) is written to a sibling,
fsynced and renamed over the final name, and the directory entry fsynced after: a crash or a
power cut at any point leaves either the old file, or the new one complete.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

_MAX_FSYNC_THREADS = 8


def write_atomically(path: Path, text: str) -> None:
    """`text` into `path` all or nothing, durable once this returns."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_tree(directory: Path) -> None:
    """fsync every file and directory under `directory` (a checkpoint or an export: few files).

    All at once, from threads (fsync releases the GIL): on ext4 fsyncs that arrive together
    share one journal commit, so a checkpoint's files cost about one fsync's wait instead of one
    each in turn (`python -m bench trainer`: the durable commit was most of the per-epoch overhead).
    """
    paths = [(os.path.join(parent, name), False) for parent, _dirs, names in os.walk(directory) for name in names]
    paths += [(parent, True) for parent, _dirs, _names in os.walk(directory)]
    if len(paths) == 1:
        _fsync(*paths[0])
        return
    with ThreadPoolExecutor(max_workers=min(len(paths), _MAX_FSYNC_THREADS)) as pool:
        for done in [pool.submit(_fsync, path, is_dir) for path, is_dir in paths]:
            done.result()  # an fsync that failed fails the commit


def _fsync(path: str, is_dir: bool) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if is_dir else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: Path) -> None:
    """Makes the entries of `directory` (a rename into it, a new file) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
