"""Paths a request names under the shared storage root, and whose the services' own trees are.

The services keep tenants' data in the storage root next to what users put there:

    <storage_root>/runs/<run>/...                   the trainer's runs: checkpoints, logs (the run's tenant's)
    <storage_root>/models/<model>/versions/<n>/     the exporter's versions; manifest.json names the tenant
    <storage_root>/packages/                        uploaded code (content-addressed, shared)

so a path taken from a request (a checkpoint, a dataset, a working directory) is confined to
the root (`confined`), and only an admin may name one inside those trees (`check_not_managed`):
a member would otherwise read another tenant's checkpoints as a dataset, and learn from the
answer whether a directory exists.
"""

from __future__ import annotations

from pathlib import Path

from paddleray.services.common import errors, identity, model_manifest
from paddleray.services.common.storage import Storage, is_uri

MANAGED = ("runs", "models", "packages")


def resolve(uri: str, root: str | Path) -> Path:
    """A local uri (absolute, relative to the root, or file://) as a resolved path; reads
    nothing but symbolic links on the way."""
    if "\0" in uri:  # no path can hold one: resolve() would raise ValueError (INTERNAL)
        raise errors.InvalidArgument("uri", "must not contain NUL characters")
    return (Path(root).resolve() / uri.removeprefix("file://")).resolve()


def confined(uri: str, root: str | Path, field: str) -> Path | str:
    """uri resolved (see resolve), or INVALID_ARGUMENT naming field when it lies outside the
    root; on an object-store root, the URI itself when it lies under the root."""
    if "\0" in uri:
        raise errors.InvalidArgument(field, "must not contain NUL characters")
    if is_uri(root):
        storage = Storage.for_root(root)
        relative = storage.relative(uri) if is_uri(uri) else None
        if relative is None:
            raise errors.InvalidArgument(field, f"must be a URI under the storage root ({root})")
        return storage.location(relative)
    resolved = resolve(uri, root)
    if not resolved.is_relative_to(Path(root).resolve()):
        raise errors.InvalidArgument(field, f"must be a path under the storage root ({Path(root).resolve()})")
    return resolved


def is_local(uri: str) -> bool:
    """A path (absolute, relative to the root, or file://), not a URI of another file system."""
    return "://" not in uri or uri.startswith("file://")


def local_dataset(uri: str, root: str | Path, field: str) -> Path:
    """A local dataset path as the trainer will read it: under the storage root (the one place
    every service and Ray worker sees alike) and existing; INVALID_ARGUMENT naming the field
    and the storage root otherwise. Reads nothing but symbolic links and the path's existence."""
    if is_uri(root):
        raise errors.InvalidArgument(field, f"{uri!r} is a local path, and the storage root is an object store "
                                     f"({root}): name a URI every node can read ({root}/..., s3://, gs://)")
    resolved = resolve(uri, root)
    base = Path(root).resolve()
    where = f"the storage root ({base}), where the trainer and its Ray workers read local datasets"
    if not resolved.is_relative_to(base):
        raise errors.InvalidArgument(field, f"{uri!r} is not under {where}: copy it there, or name a URI "
                                     "the cluster can read (s3://, gs://, hdfs://)")
    if not resolved.exists():
        raise errors.InvalidArgument(field, f"no such file or directory under {where}: {uri!r}")
    return resolved


def check_member_path(uri: str, root: str | Path, field: str, caller: identity.Identity) -> None:
    """A local path a caller names for the trainer to open (a dataset, a working_dir): not in
    the services' trees unless the caller is an admin. Remote URIs pass; so do paths outside
    the root (the trainer refuses those datasets itself)."""
    if not uri or caller.is_admin:
        return
    if is_uri(root):  # a URI under an object-store root may name the services' trees too
        relative = Storage.for_root(root).relative(uri) if is_uri(uri) else None
        tree = relative.split("/", 1)[0] if relative else None
        if tree in MANAGED:
            raise errors.PermissionDenied(f"{field}: {tree}/ under the storage root holds every tenant's data; "
                                          "only an admin credential may name a path in it")
        return
    if "://" in uri and not uri.startswith("file://"):
        return
    path = resolve(uri, root)
    if path.is_relative_to(Path(root).resolve()):
        check_not_managed(path, root, field, caller)


def managed_tree(path: Path, root: str | Path) -> str | None:
    """The services' tree (runs, models, packages) that a confined path lies in, if any."""
    relative = path.relative_to(Path(root).resolve())
    return relative.parts[0] if relative.parts and relative.parts[0] in MANAGED else None


def check_not_managed(path: Path, root: str | Path, field: str, caller: identity.Identity) -> None:
    """PERMISSION_DENIED for a caller other than an admin naming a path inside runs/, models/
    or packages/: those hold every tenant's checkpoints, models and code."""
    tree = managed_tree(path, root)
    if tree is not None and not caller.is_admin:
        raise errors.PermissionDenied(
            f"{field}: {tree}/ under the storage root holds every tenant's data; only an admin credential "
            "may name a path in it"
        )


def model_version_dir(root: str | Path, model_id: str, version: str | int) -> Path | str:
    """The version's directory: a Path on a directory root, a URI on an object-store root."""
    relative = f"models/{model_id}/versions/{version}"
    return Storage.for_root(root).location(relative) if is_uri(root) else Path(root) / relative


def version_tenant(directory: Path | str) -> str | None:
    """The tenant of the exported version in directory, None when it is not exported (no
    manifest, or one cut short). A manifest written before versions recorded their tenant is
    the default tenant's."""
    try:
        manifest = model_manifest.Manifest.load(directory)
    except errors.FailedPrecondition:
        return None
    return manifest.tenant or identity.DEFAULT_TENANT
