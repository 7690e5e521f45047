"""Code packages as every service names them: URIs, resource names, where the zip is stored.

A package is a zip of a client's project directory, named by the sha256 of the zip's bytes
(content-addressed: the same content is one package, and a name never changes its content).
The scheduler stores it at `<storage_root>/packages/sha256-<hex>.zip`; the trainer reads it
from the same shared storage root and hands that zip to Ray as the workers' working_dir.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterable
from pathlib import Path

from paddleray.services.common import errors

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
