"""Code packages as every service names them: URIs, resource names, where the zip is stored.

A package is a zip of a client's project directory, named by the sha256 of the zip's bytes
(content-addressed: the same content is one package, and a name never changes its content).
The scheduler stores it at `<storage_root>/packages/sha256-<hex>.zip`; the trainer (a job's
workers) and the exporter (an export task) read it from the same shared storage root. Ray takes
neither the URI nor, for a task or an actor, a local path: `stored_package` resolves the URI to
the stored zip and its file list, the one resolution both services use, and
`ray_private.upload_working_dir` then names that zip by the URI Ray accepts (gcs://...).
"""

from __future__ import annotations

import hashlib
import os
import re
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from paddleray.services.common import errors, node_cache
from paddleray.services.common.storage import Storage, cache_dir, is_uri

URI_PREFIX = "paddleray://packages/"
NAME_PREFIX = "packages/"
_ID = re.compile(r"sha256-([0-9a-f]{64})")
_DIGEST = re.compile(r"[0-9a-f]{64}")
# Suffixes of importable module files other than plain .py (extension modules).
_EXTENSION_SUFFIXES = (".so", ".pyd")
# What a Ray worker of the trainer imports before user code runs, besides what a service
# process has imported anyway (the standard library modules Ray, gRPC and asyncio use).
WORKER_IMPORTS = frozenset({"ray", "paddle", "paddleray", "numpy"})


def is_package_uri(value: str) -> bool:
    return value.startswith(URI_PREFIX)


def uri(digest: str) -> str:
    return f"{URI_PREFIX}sha256-{digest}"


def name(digest: str) -> str:
    return f"{NAME_PREFIX}sha256-{digest}"


def valid_digest(digest: str) -> bool:
    return bool(_DIGEST.fullmatch(digest))


def digest_from_uri(value: str, field: str) -> str:
    """The digest a package URI names; InvalidArgument naming `field` when it is malformed."""
    match = _ID.fullmatch(value.removeprefix(URI_PREFIX)) if is_package_uri(value) else None
    if match is None:
        raise errors.InvalidArgument(field, f"a package URI has the form '{URI_PREFIX}sha256-<64 hex digits>'")
    return match.group(1)


def digest_from_name(value: str, field: str = "name") -> str:
    match = _ID.fullmatch(value.removeprefix(NAME_PREFIX)) if value.startswith(NAME_PREFIX) else None
    if match is None:
        raise errors.InvalidArgument(field, f"must have the form '{NAME_PREFIX}sha256-<64 hex digits>'")
    return match.group(1)


def directory(storage_root: str | Path) -> Path:
    return Path(storage_root) / "packages"


def zip_path(storage_root: str | Path, digest: str) -> Path:
    return directory(storage_root) / f"sha256-{digest}.zip"


@dataclass(frozen=True)
class StoredPackage:
    """A package URI resolved on this storage root: the zip Ray is given, and its file names."""

    uri: str
    zip_path: Path
    files: tuple[str, ...]


def stored_package(working_dir: str, storage_root: str | Path, field: str,
                   imported: Iterable[str] = ()) -> StoredPackage:
    """The stored zip a package URI names and its files. InvalidArgument naming `field` for a
    malformed URI or a package whose top-level modules would replace `imported` ones (or those
    every worker needs); FailedPrecondition when this storage root does not hold it or it
    cannot be read."""
    path = local_zip(storage_root, digest_from_uri(working_dir, field))
    if path is None:
        raise errors.FailedPrecondition(
            f"{field}: package {working_dir} is not in this service's storage root ({storage_root}); "
            "upload it to a scheduler that shares this storage root"
        )
    try:
        files = file_names(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise errors.FailedPrecondition(f"{field}: the stored package cannot be read: {exc}") from exc
    check_no_shadowing(files, imported, field)
    return StoredPackage(uri=working_dir, zip_path=path, files=tuple(files))


def object_name(digest: str) -> str:
    """The zip's path relative to the storage root."""
    return f"packages/sha256-{digest}.zip"


def local_zip(storage_root: str | Path, digest: str) -> Path | None:
    """The stored zip as a local file, None when the root does not hold it: the file itself on
    a directory root; on an object store, a copy in this node's cache, downloaded once (a
    package's content never changes: the digest is checked) and published by a rename, used
    while the object is there."""
    if not is_uri(storage_root):
        path = zip_path(storage_root, digest)
        return path if path.is_file() else None
    storage = Storage.for_root(storage_root)
    target = cache_dir("packages") / f"sha256-{digest}.zip"
    if node_cache.touch(target).is_file():  # still stored? (a package collected since must not be used)
        return target if storage.exists(object_name(digest)) else None
    try:
        data = storage.read_bytes(object_name(digest))
    except FileNotFoundError:
        return None
    if hashlib.sha256(data).hexdigest() != digest:
        raise errors.FailedPrecondition(f"the stored package sha256-{digest} does not match its digest")
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    partial.write_bytes(data)
    os.replace(partial, target)
    node_cache.prune(cache_dir(), keep=target)
    return target


def file_names(path: Path) -> list[str]:
    """Names of the files in a stored package (read from the zip's central directory only)."""
    with zipfile.ZipFile(path) as archive:
        return [entry for entry in archive.namelist() if not entry.endswith("/")]


def module_file_in(module: str, files: Iterable[str]) -> bool:
    """Whether the module `a.b.c` is a file of the package: a/b/c.py, a/b/c/__init__.py, or an
    extension module a/b/c.<tag>.so."""
    base = module.replace(".", "/")
    for entry in files:
        if entry in (f"{base}.py", f"{base}/__init__.py"):
            return True
        if entry.startswith(f"{base}.") and entry.endswith(_EXTENSION_SUFFIXES) and "/" not in entry[len(base):]:
            return True
    return False


def shadowing_modules(files: Iterable[str], imported: Iterable[str]) -> list[str]:
    """Top-level modules of the package (x.py, x/__init__.py, x.<tag>.so) named like one of
    `imported`: first on the workers' sys.path, such a file would replace the module the worker
    process itself needs (a `json.py` breaks Ray's worker before any user code runs). A
    directory without __init__.py is a namespace portion and replaces nothing."""
    names = set()
    for entry in files:
        top, _, rest = entry.partition("/")
        if rest == "__init__.py":
            names.add(top)
        elif not rest and top.endswith((".py", *_EXTENSION_SUFFIXES)):
            names.add(top.partition(".")[0])
    taken = {name.partition(".")[0] for name in imported}
    return sorted(names & taken)


def check_no_shadowing(files: Iterable[str], imported: Iterable[str], field: str) -> None:
    if shadowed := shadowing_modules(files, {*imported, *WORKER_IMPORTS}):
        raise errors.InvalidArgument(
            field, f"the package's top-level {', '.join(shadowed)} would replace the module(s) of that name the "
            "workers need (they come first on sys.path): rename them or move them into your package",
        )
