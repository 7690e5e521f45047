"""This node's copies of remote files, kept within a byte budget.

Runs in: any process that copies from an object store onto its node (a Serve replica loading a
model, a rank resuming from a checkpoint, a trainer or scheduler reading a package).

The kinds pruned here are copies that can always be fetched again, because their source never
changes once complete: exported versions (`models/`, common.model_cache), checkpoints and other
directories (`copies/`, storage.local_copy) and package zips (`packages/`, packages.local_zip).
Every entry is published whole by a rename, and every hit touches its mtime, so the mtime says
when it was last used. After each new entry is published, `prune()` removes the least recently
used entries until the kinds together hold at most `PADDLERAY_CACHE_MAX_BYTES` (default 20 GiB).
It also removes partial downloads older than an hour, which a process killed mid-copy leaves
behind.

An entry used in the last `GRACE_S` is never removed, because its user may still be opening
files (Paddle Inference and ONNX Runtime read a model once, at load). If every entry over the
budget is in its grace time, the cache stays over budget and logs a warning. A load never
breaks to keep the budget. Per-run scratch (`runs/`) and export staging (`exports/`) belong to
their run or task and are not pruned here.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

PRUNED_KINDS = ("models", "copies", "packages")
MAX_BYTES_ENV = "PADDLERAY_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 20 * 1024**3
GRACE_S = 600.0
PARTIAL_MAX_AGE_S = 3600.0


@dataclass(frozen=True)
class _Entry:
    path: Path
    last_used: float
    size: int


def max_bytes() -> int:
    """The budget: PADDLERAY_CACHE_MAX_BYTES when set to a whole number >= 0, else the default.

    A bad value keeps the default and logs it: a replica or rank must not fail to load a model
    over a cache setting."""
    raw = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    try:
        value = int(raw)
        if value < 0:
            raise ValueError
    except ValueError:
        log.warning("%s=%r is not a whole number of bytes >= 0; using %d", MAX_BYTES_ENV, raw, DEFAULT_MAX_BYTES)
        return DEFAULT_MAX_BYTES
    return value


def touch(entry: Path) -> Path:
    """Marks entry as used now (its mtime) and returns it; a hit calls this."""
    try:
        os.utime(entry)
    except OSError:  # pruned by another process this instant: the caller sees it is gone
        pass
    return entry


def prune(base: Path, keep: Path | None = None, now: float | None = None) -> list[Path]:
    """Removes least recently used entries of base's pruned kinds beyond the budget, and stale
    partial downloads; never `keep` (the entry just published) nor one in its grace time.
    Returns what was removed."""
    now = time.time() if now is None else now
    removed: list[Path] = []
    entries: list[_Entry] = []
    for kind in PRUNED_KINDS:
        folder = base / kind
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            try:
                used = path.stat().st_mtime
            except OSError:  # removed by another process meanwhile
                continue
            if ".partial" in path.name:
                if now - used > PARTIAL_MAX_AGE_S and _remove(path):
                    removed.append(path)
                continue
            entries.append(_Entry(path, used, _size(path)))
    total = sum(e.size for e in entries)
    budget = max_bytes()
    for entry in sorted(entries, key=lambda e: e.last_used):
        if total <= budget:
            break
        if (keep is not None and entry.path == keep) or now - entry.last_used < GRACE_S:
            continue
        if _remove(entry.path):
            total -= entry.size
            removed.append(entry.path)
    if total > budget:
        log.warning("node cache %s holds %d bytes, over its budget of %d (%s), in entries used in the last %g s",
                    base, total, budget, MAX_BYTES_ENV, GRACE_S)
    return removed


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _remove(path: Path) -> bool:
    """Removes an entry: renamed aside first, so no reader finds it half removed."""
    aside = path.with_name(f"{path.name}.{os.getpid()}.removing.partial")
    try:
        os.rename(path, aside)
    except OSError:
        return False  # gone already, or taken by another process's prune
    if aside.is_dir():
        shutil.rmtree(aside, ignore_errors=True)
    else:
        aside.unlink(missing_ok=True)
    return True
