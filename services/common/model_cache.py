"""An exported version on an object store, as a local directory on this node: what a Serve
replica loads its predictor from (Paddle Inference and ONNX Runtime open local files only).

`local_version(directory)` returns a path unchanged. For a URI (s3://.../models/<id>/versions/<n>)
it reads manifest.json first, since the export writes it last: a version without one is not
complete and is refused (FailedPrecondition), never served. The files are then downloaded
into a sibling of the cache entry, checked against the manifest's SHA-256 of every file, and
published by a rename, so a copy cut short or altered in transit is never used. The entry is
keyed by the URI and the manifest's bytes: a version exported again under the same number
(after a delete) gets a fresh copy, while every replica of one version on a node shares one.
The node's copies are kept within a byte budget, least recently used first (common.node_cache).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from pathlib import Path

from paddleray.services.common import node_cache
from paddleray.services.common.errors import FailedPrecondition
from paddleray.services.common.model_manifest import MANIFEST, Manifest, sha256_of
from paddleray.services.common.storage import Storage, cache_dir, is_uri


def local_version(directory: str | os.PathLike) -> Path:
    """A local directory holding the complete version at directory (see the module's docstring)."""
    if not is_uri(directory):
        return Path(directory)
    uri = os.fspath(directory).rstrip("/")
    storage = Storage.for_root(uri)
    try:
        text = storage.read_bytes(MANIFEST)
    except FileNotFoundError:
        raise FailedPrecondition(f"artifact {uri}: no {MANIFEST} (the export is missing or incomplete)") from None
    except OSError as exc:
        raise FailedPrecondition(f"artifact {uri}: {MANIFEST} cannot be read from the object store: {exc}") from None
    key = hashlib.sha256(uri.encode() + b"\n" + text).hexdigest()[:32]
    target = cache_dir("models") / key
    if (node_cache.touch(target) / MANIFEST).is_file():
        return target
    partial = target.with_name(f"{key}.{uuid.uuid4().hex[:8]}.partial")
    try:
        try:
            storage.download_dir("", partial)
        except OSError as exc:
            raise FailedPrecondition(f"artifact {uri}: cannot be downloaded: {exc}") from None
        # The manifest read first is the one the files are checked against (and kept).
        (partial / MANIFEST).write_bytes(text)
        _check(partial, Manifest.load(partial), uri)
        try:
            os.rename(partial, target)
        except OSError:  # another replica on this node published it first
            if not (target / MANIFEST).is_file():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    node_cache.prune(cache_dir(), keep=target)
    return target


def _check(directory: Path, manifest: Manifest, uri: str) -> None:
    for path, digest in manifest.files.items():
        local = directory / path
        if not local.is_file():
            raise FailedPrecondition(f"artifact {uri}: {MANIFEST} names {path}, which is not on the object store")
        if sha256_of(local) != digest:
            raise FailedPrecondition(f"artifact {uri}: {path} does not match the SHA-256 in {MANIFEST}")
