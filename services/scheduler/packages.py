"""PackageStore: code packages uploaded by clients, stored on the (shared) storage root.

An upload streams into a temporary file while its sha256 is computed; it is accepted only
when the bytes match the header's size and digest and form a zip whose entries all stay
inside it, then fsynced and renamed into place (and the directory entry fsynced), so a
package that was acknowledged survives a crash and a half-written one is never seen under
its name. Packages are content-addressed and immutable: two uploads of the same content
rename identical bytes onto one name, and nothing ever rewrites a stored package.

A package's modification time is when it was last uploaded or named by a new job (`touch`);
`collect` removes those not used for the retention period that no unfinished job names
(package_gc.py decides which are named).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import time
import uuid
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path, PurePosixPath

from google.protobuf import timestamp_pb2

from paddleray.scheduler.v1 import package_service_pb2 as pb
from paddleray.services.common import errors, identity, packages
from paddleray.services.common.identity import Identity

log = logging.getLogger(__name__)

_TMP_PREFIX = ".tmp-"
# An upload's temporary file older than this was left by a scheduler that died mid-upload
# (an upload in progress, of this replica or another, writes to its file all along).
_STALE_UPLOAD_S = 3600.0
# Writes are batched to about this size before going to a thread (chunks are usually 1 MiB).
_WRITE_BATCH = 4 << 20


class PackageStore:
    def __init__(self, storage_root: str | os.PathLike, max_bytes: int) -> None:
        self.storage_root = Path(storage_root)
        self.directory = packages.directory(self.storage_root)
        self.max_bytes = max_bytes

    def remove_stale_uploads(self, now: float | None = None) -> int:
        """Deletes temporary files of uploads that cannot finish any more; returns how many."""
        now = time.time() if now is None else now
        removed = 0
        for tmp in self.directory.glob(f"{_TMP_PREFIX}*"):
            with contextlib.suppress(FileNotFoundError):
                if now - tmp.stat().st_mtime > _STALE_UPLOAD_S:
                    tmp.unlink()
                    removed += 1
        return removed

    def path(self, digest: str) -> Path:
        return packages.zip_path(self.storage_root, digest)

    def touch(self, digest: str) -> None:
        """Marks a package used now (a job names it): it is kept a whole retention period more."""
        with contextlib.suppress(FileNotFoundError):
            os.utime(self.path(digest))

    def stored(self) -> dict[str, float]:
        """Digest -> last use (modification time) of every stored package."""
        found: dict[str, float] = {}
        for path in self.directory.glob("sha256-*.zip"):
            digest = path.name.removeprefix("sha256-").removesuffix(".zip")
            if packages.valid_digest(digest):
                with contextlib.suppress(FileNotFoundError):
                    found[digest] = path.stat().st_mtime
        return found

    def collect(self, in_use: set[str], retention_s: float, now: float | None = None) -> list[str]:
        """Removes packages unused for retention_s that are not in_use; returns their digests.

        The time is read again just before each removal: a job that named the package since
        `stored()` was read has touched it, and it stays.
        """
        now = time.time() if now is None else now
        removed = []
        for digest in self.stored():
            if digest in in_use:
                continue
            path = self.path(digest)
            with contextlib.suppress(FileNotFoundError):
                if now - path.stat().st_mtime >= retention_s:
                    path.unlink()
                    removed.append(digest)
                    log.info("removed package sha256-%s: unused for %.0f s and named by no unfinished job",
                             digest, retention_s)
        return removed

    async def get(self, name: str) -> pb.Package:
        digest = packages.digest_from_name(name)
        package = await asyncio.to_thread(self._describe, digest)
        if package is None:
            raise errors.NotFound(f"{name} not found (upload it with UploadPackage)")
        return package

    async def files(self, digest: str) -> list[str] | None:
        """The files of a stored package, or None when it is not stored."""
        path = self.path(digest)
        try:
            return await asyncio.to_thread(packages.file_names, path)
        except FileNotFoundError:
            return None

    async def upload(self, requests: AsyncIterator[pb.UploadPackageRequest], *, caller: Identity) -> pb.Package:
        """UploadPackage: PERMISSION_DENIED for a read-only caller, before anything is read."""
        identity.require_write(caller, "UploadPackage")
        first = await anext(aiter(requests), None)
        if first is None or first.WhichOneof("payload") != "header":
            raise errors.InvalidArgument("header", "the first message of an upload must carry the header")
        digest, size = self._check_header(first.header)
        if (stored := await asyncio.to_thread(self._describe, digest)) is not None:
            await asyncio.to_thread(self.touch, digest)  # uploaded again: in use
            return stored
        await asyncio.to_thread(self.directory.mkdir, parents=True, exist_ok=True)
        tmp = self.directory / f"{_TMP_PREFIX}{uuid.uuid4().hex}.zip"
        try:
            await self._receive(requests, tmp, digest, size)
            await asyncio.to_thread(_check_zip, tmp)
            await asyncio.to_thread(self._publish, tmp, digest)
        finally:
            tmp.unlink(missing_ok=True)
        log.info("stored package sha256-%s (%d bytes)", digest, size)
        package = await asyncio.to_thread(self._describe, digest)
        assert package is not None  # just renamed into place (and too new to be collected)
        return package

    def _publish(self, tmp: Path, digest: str) -> None:
        _publish(tmp, self.path(digest))

    def _check_header(self, header: pb.PackageHeader) -> tuple[str, int]:
        if not packages.valid_digest(header.sha256):
            raise errors.InvalidArgument("header.sha256", "must be 64 lowercase hex digits (the zip's sha256)")
        if header.size_bytes <= 0:
            raise errors.InvalidArgument("header.size_bytes", "must be the zip's size in bytes (> 0)")
        self._check_size(header.size_bytes)
        return header.sha256, header.size_bytes

    def _check_size(self, size: int) -> None:
        if size > self.max_bytes:
            raise errors.ResourceExhausted(
                f"the package is {size} bytes; the limit is {self.max_bytes} bytes "
                "(PADDLERAY_SCHEDULER_PACKAGE_MAX_BYTES): exclude data and build outputs from the upload"
            )

    async def _receive(self, requests, tmp: Path, digest: str, size: int) -> None:
        hasher = hashlib.sha256()
        received = buffered = 0
        pending: list[bytes] = []
        with open(tmp, "wb") as out:
            async for request in requests:
                if request.WhichOneof("payload") != "chunk":
                    raise errors.InvalidArgument("header", "only the first message of an upload may carry a header")
                received += len(request.chunk)
                if received > size:
                    raise errors.InvalidArgument("chunk", f"more bytes than header.size_bytes ({size}) declared")
                hasher.update(request.chunk)
                pending.append(request.chunk)
                buffered += len(request.chunk)
                if buffered >= _WRITE_BATCH:
                    await asyncio.to_thread(out.writelines, pending)
                    pending, buffered = [], 0
            await asyncio.to_thread(_finish, out, pending)
        if received != size:
            raise errors.InvalidArgument("chunk", f"received {received} bytes; header.size_bytes declared {size}")
        if hasher.hexdigest() != digest:
            raise errors.InvalidArgument(
                "header.sha256", f"the bytes received have sha256 {hasher.hexdigest()}, not the declared one"
            )

    def _describe(self, digest: str) -> pb.Package | None:
        path = self.path(digest)
        try:
            stat = path.stat()
            count = len(packages.file_names(path))
        except FileNotFoundError:
            return None
        created = timestamp_pb2.Timestamp()
        created.FromNanoseconds(stat.st_mtime_ns)
        return pb.Package(
            name=packages.name(digest), uri=packages.uri(digest), sha256=digest, size_bytes=stat.st_size,
            file_count=count, create_time=created,
        )


def _finish(out, pending: list[bytes]) -> None:
    out.writelines(pending)
    out.flush()
    os.fsync(out.fileno())


def _check_zip(path: Path) -> None:
    """A valid zip (every entry's CRC checked) whose entries all unpack inside its root."""
    try:
        with zipfile.ZipFile(path) as archive:
            for entry in archive.namelist():
                parts = PurePosixPath(entry).parts
                if entry.startswith("/") or "\\" in entry or ".." in parts or (parts and parts[0].endswith(":")):
                    raise errors.InvalidArgument("chunk", f"the zip's entry {entry!r} points outside the package")
            if (bad := archive.testzip()) is not None:
                raise errors.InvalidArgument("chunk", f"the zip's entry {bad!r} is corrupt")
    except zipfile.BadZipFile as exc:
        raise errors.InvalidArgument("chunk", f"the bytes are not a valid zip: {exc}") from exc


def _publish(tmp: Path, final: Path) -> None:
    os.replace(tmp, final)
    fd = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
