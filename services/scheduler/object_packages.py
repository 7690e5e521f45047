"""ObjectPackageStore: uploaded packages on an object-store storage root (s3://...).

The same contract as PackageStore (packages.py), where a directory's renames and modification
times are not to be had: an upload streams into a temporary file on the scheduler's node
(storage.cache_dir), is checked there, and is published with one PUT of
`packages/sha256-<hex>.zip` (atomic: the name never shows part of a zip). A package's last use
is the newer of the zip's time and that of a small marker `packages/sha256-<hex>.used`, which
`touch` rewrites (objects cannot be touched). Reading a package's files downloads it once to
this node's cache (common/packages.py: local_zip), which the trainer does too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

from google.protobuf import timestamp_pb2

from paddleray.scheduler.v1 import package_service_pb2 as pb
from paddleray.services.common import packages
from paddleray.services.common.storage import Storage, cache_dir, is_uri
from paddleray.services.scheduler.packages import PackageStore

log = logging.getLogger(__name__)


def package_store(storage_root: str | os.PathLike, max_bytes: int) -> PackageStore:
    """The store for the storage root: a directory's, or an object store's."""
    root = os.fspath(storage_root)
    return ObjectPackageStore(root, max_bytes) if is_uri(root) else PackageStore(root, max_bytes)


def _used(digest: str) -> str:
    return f"packages/sha256-{digest}.used"


class ObjectPackageStore(PackageStore):
    def __init__(self, storage_root: str, max_bytes: int) -> None:
        # Uploads in progress are spooled here (PackageStore's directory: its temporary files).
        super().__init__(cache_dir("scheduler-uploads"), max_bytes)
        self.directory = self.storage_root
        self.root = storage_root
        self.storage = Storage.for_root(storage_root)

    def path(self, digest: str) -> Path:
        """A local copy of the stored zip (downloaded on first use)."""
        local = packages.local_zip(self.root, digest)
        if local is None:
            raise FileNotFoundError(packages.object_name(digest))
        return local

    def touch(self, digest: str) -> None:
        if self.storage.exists(packages.object_name(digest)):
            self.storage.write_atomically(_used(digest), str(time.time()).encode())

    def _last_use(self, digest: str) -> float | None:
        stored = self.storage.modified(packages.object_name(digest))
        if stored is None:
            return None
        return max(stored, self.storage.modified(_used(digest)) or 0.0)

    def stored(self) -> dict[str, float]:
        found = {}
        for name in self.storage.list_dir("packages"):
            digest = name.removeprefix("sha256-").removesuffix(".zip")
            if name.endswith(".zip") and packages.valid_digest(digest) and (last := self._last_use(digest)) is not None:
                found[digest] = last
        return found

    def collect(self, in_use: set[str], retention_s: float, now: float | None = None) -> list[str]:
        now = time.time() if now is None else now
        removed = []
        for digest in self.stored():
            last = self._last_use(digest)  # read again: a job may have named it since
            if digest in in_use or last is None or now - last < retention_s:
                continue
            self.storage.delete(packages.object_name(digest))
            self.storage.delete(_used(digest))
            with contextlib.suppress(FileNotFoundError):
                (cache_dir("packages") / f"sha256-{digest}.zip").unlink()
            removed.append(digest)
            log.info("removed package sha256-%s: unused for %.0f s and named by no unfinished job", digest, retention_s)
        return removed

    async def files(self, digest: str) -> list[str] | None:
        import asyncio

        local = await asyncio.to_thread(packages.local_zip, self.root, digest)
        return None if local is None else await asyncio.to_thread(packages.file_names, local)

    def _publish(self, tmp: Path, digest: str) -> None:
        self.storage.write_atomically(packages.object_name(digest), tmp.read_bytes())

    def _describe(self, digest: str) -> pb.Package | None:
        size = self.storage.size(packages.object_name(digest))
        local = packages.local_zip(self.root, digest) if size is not None else None
        if size is None or local is None:
            return None
        created = timestamp_pb2.Timestamp()
        created.FromNanoseconds(int((self.storage.modified(packages.object_name(digest)) or 0.0) * 1e9))
        return pb.Package(
            name=packages.name(digest), uri=packages.uri(digest), sha256=digest, size_bytes=size,
            file_count=len(packages.file_names(local)), create_time=created,
        )
