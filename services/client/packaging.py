"""Ship a project directory: zip it deterministically and upload it to the scheduler.

`build_package(path)` zips a directory the same way every time (entries sorted, fixed
timestamps and permissions, one compression level), so an unchanged directory has the same
sha256, the package's identity; `upload_package(channel, path)` asks the scheduler for that
digest first (GetPackage) and streams the zip (UploadPackage, 1 MiB chunks) only when it is
not stored yet. Either way it returns the URI a job names in spec.runtime_env.working_dir.

What is left out: every `.gitignore` in the tree (each applies to its own directory and
below, with git's pattern rules, through `pathspec`), DEFAULT_EXCLUDES (VCS metadata, caches,
virtual envs), and the caller's `excludes` (gitignore patterns relative to the root). The
zip may be at most `max_bytes` (the scheduler has its own limit too,
PADDLERAY_SCHEDULER_PACKAGE_MAX_BYTES).
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pathspec

from paddleray.scheduler.v1 import package_service_pb2 as pb
from paddleray.scheduler.v1 import package_service_pb2_grpc
from paddleray.services.common import packages

DEFAULT_EXCLUDES = (
    ".git/", ".hg/", ".svn/", "__pycache__/", "*.pyc", "*.pyo", ".venv/", "venv/", ".mypy_cache/",
    ".pytest_cache/", ".ruff_cache/", ".ipynb_checkpoints/", "node_modules/", ".paddleray/", ".DS_Store",
)
DEFAULT_MAX_BYTES = 100 * 1024 * 1024
CHUNK_BYTES = 1024 * 1024
# Zip's earliest representable time: entries carry no trace of when files were touched.
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)
_COMPRESS_LEVEL = 6


class PackageError(ValueError):
    """The directory cannot be packaged: not a directory, nothing to ship, or too large."""


@dataclass(frozen=True)
class Package:
    """A built zip: its bytes, their sha256 (the package's identity) and the files it holds."""

    data: bytes
    sha256: str
    files: list[str] = field(default_factory=list)

    @property
    def uri(self) -> str:
        return packages.uri(self.sha256)

    @property
    def name(self) -> str:
        return packages.name(self.sha256)


def package_files(root: str | os.PathLike, excludes: Sequence[str] = ()) -> list[str]:
    """The files a package of `root` holds, as sorted POSIX paths relative to it."""
    base = Path(root)
    if not base.is_dir():
        raise PackageError(f"{base} is not a directory")
    rules: list[tuple[str, pathspec.GitIgnoreSpec]] = [
        ("", pathspec.GitIgnoreSpec.from_lines([*DEFAULT_EXCLUDES, *excludes]))
    ]
    found = []
    for directory, dirs, names in os.walk(base):
        relative = Path(directory).relative_to(base).as_posix()
        prefix = "" if relative == "." else relative + "/"
        ignore_file = Path(directory) / ".gitignore"
        if ignore_file.is_file():
            rules.append((prefix, pathspec.GitIgnoreSpec.from_lines(ignore_file.read_text().splitlines())))
        # Pruned here, an ignored directory is never walked (a .venv can hold many thousand files).
        dirs[:] = sorted(d for d in dirs if not _ignored(prefix + d + "/", rules))
        found += [prefix + n for n in names if not _ignored(prefix + n, rules) and _regular(Path(directory) / n)]
    return sorted(found)


def build_package(
    root: str | os.PathLike, excludes: Sequence[str] = (), max_bytes: int = DEFAULT_MAX_BYTES
) -> Package:
    """Zips `root` deterministically (same content, same bytes, same sha256)."""
    base = Path(root)
    files = package_files(base, excludes)
    if not files:
        raise PackageError(f"{base} has no files to package (all excluded?)")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=_COMPRESS_LEVEL) as archive:
        for relative in files:
            source = base / relative
            info = zipfile.ZipInfo(relative, date_time=_FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            executable = os.stat(source).st_mode & stat.S_IXUSR
            info.external_attr = ((0o755 if executable else 0o644) | stat.S_IFREG) << 16
            info.create_system = 3  # Unix, so the permissions above are read back
            archive.writestr(info, source.read_bytes(), compresslevel=_COMPRESS_LEVEL)
            if buffer.tell() > max_bytes:
                raise PackageError(_too_large(base, buffer.tell(), max_bytes))
    data = buffer.getvalue()
    if len(data) > max_bytes:
        raise PackageError(_too_large(base, len(data), max_bytes))
    return Package(data=data, sha256=hashlib.sha256(data).hexdigest(), files=files)


def upload_package(
    channel: grpc.Channel,
    path: str | os.PathLike,
    metadata: Sequence[tuple[str, str]] | None = None,
    *,
    excludes: Sequence[str] = (),
    max_bytes: int = DEFAULT_MAX_BYTES,
    timeout: float | None = 300.0,
) -> str:
    """Packages the directory `path` and makes sure the scheduler has it; returns its URI
    ("paddleray://packages/sha256-<hex>") for spec.runtime_env.working_dir.

    `channel` is a (synchronous) channel to the scheduler, `metadata` the call metadata (the
    `authorization: Bearer <token>` pair when the scheduler requires a token). Raises
    PackageError for a directory that cannot be packaged, grpc.RpcError when a call fails.
    """
    package = build_package(path, excludes, max_bytes)
    return upload_built(channel, package, metadata, timeout=timeout)


def upload_built(
    channel: grpc.Channel,
    package: Package,
    metadata: Sequence[tuple[str, str]] | None = None,
    *,
    timeout: float | None = 300.0,
) -> str:
    """Uploads a built package unless the scheduler already has it; returns its URI."""
    stub = package_service_pb2_grpc.PackageServiceStub(channel)
    try:
        found = stub.GetPackage(pb.GetPackageRequest(name=package.name), metadata=metadata, timeout=timeout)
        return found.package.uri
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.NOT_FOUND:
            raise
    stored = stub.UploadPackage(_requests(package), metadata=metadata, timeout=timeout)
    return stored.package.uri


def _requests(package: Package) -> Iterator[pb.UploadPackageRequest]:
    yield pb.UploadPackageRequest(header=pb.PackageHeader(sha256=package.sha256, size_bytes=len(package.data)))
    view = memoryview(package.data)
    for start in range(0, len(view), CHUNK_BYTES):
        yield pb.UploadPackageRequest(chunk=bytes(view[start : start + CHUNK_BYTES]))


def _ignored(relative: str, rules: list[tuple[str, pathspec.GitIgnoreSpec]]) -> bool:
    return any(relative.startswith(prefix) and spec.match_file(relative[len(prefix):]) for prefix, spec in rules)


def _regular(path: Path) -> bool:
    # Symlinks are followed to what they point at; sockets, fifos and dangling links are left out.
    try:
        return path.is_file()
    except OSError:
        return False


def _too_large(base: Path, size: int, max_bytes: int) -> str:
    return (f"{base} packages to more than {max_bytes} bytes ({size} so far): add what training does not need "
            "(data, outputs, checkpoints) to .gitignore or the excludes")
