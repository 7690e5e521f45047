"""The storage root as one small interface: a local (or shared) directory, or an object store.

Every service keeps its durable files (checkpoints, per-rank logs, exported models, uploaded
packages) under one storage root, `storage_root` in the settings: a path (a local disk, or a
shared filesystem mounted at the same path on every node) or a URI such as
`s3://bucket/prefix` that every node reaches over the network, opened through `pyarrow.fs` as
Ray Train's storage is (Ray Train's StorageContext: `pyarrow.fs.FileSystem.from_uri`, files
staged locally and copied up with `pyarrow.fs.copy_files`).

The same code runs in the services and in Ray worker processes on any node: a `Storage` is
built from the root's text alone (`for_root`), so it is cheap to send to an actor and to rebuild
there. Credentials never appear in the root: the object store's client reads them from the
process's environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
`AWS_ENDPOINT_URL` for an S3 API server other than AWS), a credentials file or the instance's
role, as the AWS SDK does.

What "atomic" means on each backend: `write_atomically` on a directory writes a temporary file,
fsyncs it and renames it over the target; on an object store one PUT is already atomic (a
reader sees the whole object or none). A directory of several files is never atomic on either:
callers that publish one (a checkpoint, an exported model) write its files first and a
manifest last, and treat a directory without its manifest as absent.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from abc import ABC, abstractmethod
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from paddleray.services.common import node_cache

# Schemes pyarrow.fs opens (s3 and gs built in; hdfs through libhdfs on the node): the ones a
# storage root may name. s3:// is the one this repository's tests run against (moto's server).
URI_SCHEMES = ("s3", "gs", "gcs", "hdfs")
_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def is_uri(root: str | os.PathLike) -> bool:
    """True for a URI of another file system (s3://...), False for a path or file:// URI."""
    text = os.fspath(root)
    return "://" in text and not text.startswith("file://")


def check_root(root: str) -> str:
    """The storage root in its canonical form: an absolute local path (~ expanded, file://
    dropped) or the URI without a trailing slash. ValueError saying what is wrong otherwise:
    the settings turn it into a one-line start-up error, a request into INVALID_ARGUMENT."""
    text = root.strip()
    if not text:
        raise ValueError("must not be empty: a directory path or a URI such as s3://bucket/prefix")
    if "\0" in text:
        raise ValueError("must not contain NUL characters")
    if not is_uri(text):
        return str(Path(text.removeprefix("file://")).expanduser().absolute())
    parts = urlsplit(text)
    if parts.scheme not in URI_SCHEMES:
        raise ValueError(f"{parts.scheme}:// is not a storage this service opens; use a path or one of "
                         + ", ".join(f"{s}://" for s in URI_SCHEMES))
    if not parts.netloc:
        raise ValueError(f"{text!r} names no bucket: expected {parts.scheme}://bucket/prefix")
    if "@" in parts.netloc or parts.password is not None:
        raise ValueError("must not carry credentials: give them in the environment (AWS_ACCESS_KEY_ID, "
                         "AWS_SECRET_ACCESS_KEY) or a mounted Secret, never in the URI")
    if parts.scheme == "s3" and not _S3_BUCKET.match(parts.netloc):
        raise ValueError(f"{parts.netloc!r} is not an S3 bucket name (3-63 lowercase letters, digits, '.', '-')")
    if parts.query or parts.fragment:
        raise ValueError("must not have ?options or a #fragment: the endpoint and region go in the environment "
                         "(AWS_ENDPOINT_URL, AWS_REGION), so that every path under the root is a plain URI")
    path = parts.path.rstrip("/")
    if any(segment in (".", "..") for segment in path.split("/")):
        raise ValueError("must not contain '.' or '..' segments")
    return f"{parts.scheme}://{parts.netloc}{path}"


class Storage(ABC):
    """Files under one storage root, addressed by relative POSIX paths ("runs/r1/logs/x.log")."""

    root: str

    @staticmethod
    def for_root(root: str | os.PathLike) -> Storage:
        canonical = check_root(os.fspath(root))
        return ObjectStorage(canonical) if is_uri(canonical) else LocalStorage(Path(canonical))

    @property
    def is_local(self) -> bool:
        return isinstance(self, LocalStorage)

    @abstractmethod
    def location(self, relative: str) -> str:
        """Where relative lives, as a path or URI a user or another service can be shown."""

    @abstractmethod
    def relative(self, location: str) -> str | None:
        """The relative path of a location under this root; None when it lies outside."""

    @abstractmethod
    def exists(self, relative: str) -> bool: ...

    @abstractmethod
    def read_bytes(self, relative: str) -> bytes:
        """FileNotFoundError when there is no such file."""

    @abstractmethod
    def read_range(self, relative: str, offset: int, length: int) -> bytes:
        """At most length bytes from offset (b"" past the end); FileNotFoundError when absent."""

    @abstractmethod
    def size(self, relative: str) -> int | None:
        """The file's size, None when there is no such file."""

    @abstractmethod
    def modified(self, relative: str) -> float | None:
        """The file's modification time (Unix seconds), None when there is no such file."""

    @abstractmethod
    def write_atomically(self, relative: str, data: bytes) -> None:
        """Writes the whole file at once: a reader sees the old content or the new, never part."""

    @abstractmethod
    def list_dir(self, relative: str) -> list[str]:
        """Names of the entries directly under relative (files and directories); [] when absent."""

    @abstractmethod
    def delete(self, relative: str) -> None:
        """Removes a file or a directory tree; nothing when it is absent."""

    @abstractmethod
    def upload_dir(self, source: Path, relative: str) -> None:
        """Copies a local directory's files to relative (merged with what is there)."""

    @abstractmethod
    def download_dir(self, relative: str, target: Path) -> None:
        """Copies relative's files into a local directory (created); FileNotFoundError when absent."""

    def read_text(self, relative: str) -> str:
        return self.read_bytes(relative).decode()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.root!r})"

    def __reduce__(self):  # rebuilt from the root's text in a Ray worker, not pickled with clients
        return Storage.for_root, (self.root,)


class LocalStorage(Storage):
    """A directory: the local disk, or a shared filesystem mounted alike on every node."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.path = root

    def _path(self, relative: str) -> Path:
        return self.path / relative if relative else self.path

    def location(self, relative: str) -> str:
        return str(self._path(relative))

    def relative(self, location: str) -> str | None:
        path = Path(location.removeprefix("file://"))
        base = self.path.resolve()
        resolved = (base / path).resolve()
        return resolved.relative_to(base).as_posix() if resolved.is_relative_to(base) else None

    def exists(self, relative: str) -> bool:
        return self._path(relative).exists()

    def read_bytes(self, relative: str) -> bytes:
        return self._path(relative).read_bytes()

    def read_range(self, relative: str, offset: int, length: int) -> bytes:
        with open(self._path(relative), "rb") as f:
            f.seek(offset)
            return f.read(length)

    def size(self, relative: str) -> int | None:
        try:
            return self._path(relative).stat().st_size
        except FileNotFoundError:
            return None

    def modified(self, relative: str) -> float | None:
        try:
            return self._path(relative).stat().st_mtime
        except FileNotFoundError:
            return None

    def write_atomically(self, relative: str, data: bytes) -> None:
        path = self._path(relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def list_dir(self, relative: str) -> list[str]:
        try:
            return sorted(child.name for child in self._path(relative).iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return []

    def delete(self, relative: str) -> None:
        path = self._path(relative)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)

    def upload_dir(self, source: Path, relative: str) -> None:
        shutil.copytree(source, self._path(relative), dirs_exist_ok=True)

    def download_dir(self, relative: str, target: Path) -> None:
        source = self._path(relative)
        if not source.is_dir():
            raise FileNotFoundError(f"no directory {source}")
        shutil.copytree(source, target, dirs_exist_ok=True)


class ObjectStorage(Storage):
    """An object store (s3://bucket/prefix) through pyarrow.fs. Directories are key prefixes:
    they exist while an object is under them, and need not be created."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._public = root
        self._fs = None

    @property
    def fs(self):
        return self._filesystem()[0]

    def _filesystem(self):
        """(filesystem, the root's path in it), made on first use: a Storage is built in
        processes that never open it."""
        if self._fs is None:
            import pyarrow.fs

            self._fs, base = pyarrow.fs.FileSystem.from_uri(self.root)
            self._base = base.rstrip("/")
        return self._fs, self._base

    def _key(self, relative: str) -> str:
        base = self._filesystem()[1]
        return f"{base}/{relative}".rstrip("/") if relative else base

    def location(self, relative: str) -> str:
        return f"{self._public}/{relative}" if relative else self._public

    def relative(self, location: str) -> str | None:
        text = location.rstrip("/")
        if text == self._public:
            return ""
        if not text.startswith(self._public + "/"):
            return None
        rest = PurePosixPath(text[len(self._public) + 1 :])
        if any(part in (".", "..") for part in rest.parts):
            return None
        return rest.as_posix()

    def _info(self, relative: str):
        return self.fs.get_file_info(self._key(relative))

    def exists(self, relative: str) -> bool:
        import pyarrow.fs

        return self._info(relative).type != pyarrow.fs.FileType.NotFound

    def read_bytes(self, relative: str) -> bytes:
        with self._open(relative) as f:
            return f.read()

    def read_range(self, relative: str, offset: int, length: int) -> bytes:
        with self._open(relative) as f:
            return f.read_at(length, offset) if offset < f.size() else b""

    def _open(self, relative: str):
        try:
            return self.fs.open_input_file(self._key(relative))
        except OSError as error:
            if "not found" in str(error).lower() or "does not exist" in str(error).lower() or "NoSuchKey" in str(error):
                raise FileNotFoundError(self.location(relative)) from None
            raise

    def size(self, relative: str) -> int | None:
        import pyarrow.fs

        info = self._info(relative)
        return info.size if info.type == pyarrow.fs.FileType.File else None

    def modified(self, relative: str) -> float | None:
        import pyarrow.fs

        info = self._info(relative)
        if info.type != pyarrow.fs.FileType.File or info.mtime is None:
            return None
        return info.mtime.timestamp()

    def write_atomically(self, relative: str, data: bytes) -> None:
        with self.fs.open_output_stream(self._key(relative)) as out:
            out.write(data)

    def list_dir(self, relative: str) -> list[str]:
        import pyarrow.fs

        selector = pyarrow.fs.FileSelector(self._key(relative), allow_not_found=True, recursive=False)
        return sorted(PurePosixPath(info.path).name for info in self.fs.get_file_info(selector))

    def delete(self, relative: str) -> None:
        import pyarrow.fs

        info = self._info(relative)
        if info.type == pyarrow.fs.FileType.Directory:
            self.fs.delete_dir(self._key(relative))
        elif info.type == pyarrow.fs.FileType.File:
            self.fs.delete_file(self._key(relative))

    def upload_dir(self, source: Path, relative: str) -> None:
        import pyarrow.fs

        pyarrow.fs.copy_files(str(source), self._key(relative), source_filesystem=pyarrow.fs.LocalFileSystem(),
                              destination_filesystem=self.fs)

    def download_dir(self, relative: str, target: Path) -> None:
        import pyarrow.fs

        if self._info(relative).type != pyarrow.fs.FileType.Directory:
            raise FileNotFoundError(f"no directory {self.location(relative)}")
        target.mkdir(parents=True, exist_ok=True)
        pyarrow.fs.copy_files(self._key(relative), str(target), source_filesystem=self.fs,
                              destination_filesystem=pyarrow.fs.LocalFileSystem())


def cache_dir(*parts: str) -> Path:
    """A local directory on this node for copies of remote files (a checkpoint to resume from,
    a model to serve, a package to import): `PADDLERAY_CACHE_DIR`, else the system's temp dir."""
    base = Path(os.environ.get("PADDLERAY_CACHE_DIR") or Path(tempfile.gettempdir()) / "paddleray-cache")
    path = base.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def local_copy(location: str | os.PathLike) -> Path:
    """A local directory with the files of location: the path itself when it is one; for a
    URI, a copy in this node's cache, downloaded once (a checkpoint or model never changes
    once complete) and published by a rename, so a copy cut short is never used; the node's
    copies are kept within a byte budget (common.node_cache)."""
    if not is_uri(location):
        return Path(location)
    uri = os.fspath(location)
    import hashlib

    target = cache_dir("copies") / hashlib.sha256(uri.encode()).hexdigest()[:24]
    if node_cache.touch(target).is_dir():
        return target
    partial = target.with_name(f"{target.name}.{uuid.uuid4().hex[:8]}.partial")
    try:
        Storage.for_root(uri).download_dir("", partial)
        try:
            os.rename(partial, target)
        except OSError:  # another process published it first
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    node_cache.prune(cache_dir(), keep=target)
    return target
