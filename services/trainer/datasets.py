"""Datasets of a run, read with Ray Data and split across the ranks.

Each rank gets one `streaming_split(world_size, equal=True)` iterator per dataset: blocks
are read by Ray Data tasks and move through the object store to the rank that consumes
them, so no rank reads everything and the driver never holds the data. `equal=True` gives
every rank the same number of rows (dropping at most world_size - 1), which data-parallel
loops need to take the same number of steps.

`resolve_datasets` checks a spec's datasets without reading them (StartRun calls it so a bad
path fails the request, not the run later); `open_dataset_shards` resolves and opens them.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from paddleray.common.v1 import common_pb2
from paddleray.services.common import storage_paths
from paddleray.services.common.errors import InvalidArgument

_FORMAT_BY_ENUM = {
    common_pb2.DATASET_FORMAT_PARQUET: "parquet",
    common_pb2.DATASET_FORMAT_CSV: "csv",
    common_pb2.DATASET_FORMAT_NPY: "npy",
}
_FORMAT_BY_SUFFIX = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".npy": "npy"}

# Read tasks ask for no CPU: the ranks usually hold every CPU of their placement group, and
# a read task waiting for a CPU that a rank waiting for its data holds would never run.
# Ray Data's own backpressure still bounds how many run at once.
_READ_REMOTE_ARGS = {"num_cpus": 0}


@dataclass(frozen=True)
class ResolvedDataset:
    name: str
    # A local path or a URI that pyarrow / fsspec opens.
    location: str
    format: str


def _field(index: int, name: str) -> str:
    return f"spec.datasets[{index}].{name}"


def _check_remote(uri: str, index: int) -> None:
    import pyarrow.fs

    try:
        filesystem, path = pyarrow.fs.FileSystem.from_uri(uri)
        info = filesystem.get_file_info(path)
    except Exception as exc:  # noqa: BLE001 - any failure to open the URI is the client's to fix
        raise InvalidArgument(_field(index, "uri"), f"cannot open {uri!r}: {exc}") from None
    if info.type == pyarrow.fs.FileType.NotFound:
        raise InvalidArgument(_field(index, "uri"), f"no such file or directory: {uri!r}")


def _format(dataset: common_pb2.Dataset, index: int) -> str:
    if dataset.format != common_pb2.DATASET_FORMAT_UNSPECIFIED:
        if dataset.format not in _FORMAT_BY_ENUM:
            raise InvalidArgument(_field(index, "format"), f"unknown format value {dataset.format}")
        return _FORMAT_BY_ENUM[dataset.format]
    suffix = Path(urlparse(dataset.uri).path).suffix.lower()
    if suffix not in _FORMAT_BY_SUFFIX:
        raise InvalidArgument(
            _field(index, "format"),
            f"must be set when the uri does not end in one of {sorted(_FORMAT_BY_SUFFIX)} (got {dataset.uri!r})",
        )
    return _FORMAT_BY_SUFFIX[suffix]


def _check_header(location: str, fmt: str, index: int) -> None:
    """Reads a single file's header, so a file of the wrong format fails StartRun, not the run."""
    import numpy as np
    import pyarrow.fs
    import pyarrow.parquet as pq

    if "://" in location:
        filesystem, path = pyarrow.fs.FileSystem.from_uri(location)
    else:
        filesystem, path = pyarrow.fs.LocalFileSystem(), location
    if filesystem.get_file_info(path).type != pyarrow.fs.FileType.File:
        return  # a directory of files: each is checked when read
    try:
        with filesystem.open_input_file(path) as f:
            if fmt == "parquet":
                pq.read_metadata(f)
            elif fmt == "npy":
                np.lib.format.read_magic(f)
    except Exception as exc:  # noqa: BLE001 - whatever the parser says, the file is the client's to fix
        raise InvalidArgument(_field(index, "uri"), f"cannot read as {fmt}: {exc}") from None


def resolve_datasets(datasets, storage_root: str | Path) -> list[ResolvedDataset]:
    """Checks names, formats, that every file exists and that single files start as their format says."""
    resolved, seen = [], set()
    for index, dataset in enumerate(datasets):
        if not dataset.name:
            raise InvalidArgument(_field(index, "name"), "must not be empty")
        if dataset.name in seen:
            raise InvalidArgument(_field(index, "name"), f"must be unique, {dataset.name!r} is repeated")
        seen.add(dataset.name)
        if not dataset.uri:
            raise InvalidArgument(_field(index, "uri"), "must not be empty")
        fmt = _format(dataset, index)
        if storage_paths.is_local(dataset.uri):
            # Clients choose the path: `..` or an absolute path must not reach the trainer's other files.
            location = str(storage_paths.local_dataset(dataset.uri, storage_root, _field(index, "uri")))
        else:
            _check_remote(dataset.uri, index)
            location = dataset.uri
        _check_header(location, fmt, index)
        resolved.append(ResolvedDataset(dataset.name, location, fmt))
    return resolved


def _read_parquet(location: str, file_extensions=None, **remote_args):
    """Parquet through a plain file datasource: ray.data.read_parquet runs its file listing
    (and, on its older path, its schema sampling) as tasks fixed at one CPU, which never run
    while the ranks hold every CPU."""
    import ray.data
    from ray.data.datasource import FileBasedDatasource

    class ParquetFiles(FileBasedDatasource):
        _FILE_EXTENSIONS = ["parquet", "pq"]

        def _open_input_source(self, filesystem, path, **open_args):
            return filesystem.open_input_file(path)  # parquet needs random access

        def _read_stream(self, f, path):
            import pyarrow as pa
            import pyarrow.parquet as pq

            for batch in pq.ParquetFile(f).iter_batches():
                yield pa.Table.from_batches([batch])

    return ray.data.read_datasource(ParquetFiles(location, file_extensions=file_extensions), **remote_args)


def _read_numpy(location: str, file_extensions=None, **remote_args):
    """ray.data.read_numpy without its fixed one-CPU read tasks (it takes no num_cpus): the rows
    it makes (each file's array in a column "data"), through the public datasource base rather
    than Ray Data's internal NumpyDatasource."""
    import ray.data
    from ray.data.block import BlockAccessor
    from ray.data.datasource import FileBasedDatasource

    class NumpyFiles(FileBasedDatasource):
        _FILE_EXTENSIONS = ["npy"]

        def _read_stream(self, f, path):
            import numpy as np

            yield BlockAccessor.batch_to_block({"data": np.load(io.BytesIO(f.readall()), allow_pickle=False)})

    return ray.data.read_datasource(NumpyFiles(location, file_extensions=file_extensions), **remote_args)


def read_dataset(dataset: ResolvedDataset):
    """The dataset as a lazy ray.data.Dataset. Its read tasks, on any node, reach an object
    store with their node's credentials (docs/storage.md): none are passed in their runtime
    env, which Ray writes to its logs."""
    import ray.data

    readers: dict[str, Callable[..., Any]] = {"parquet": _read_parquet, "csv": ray.data.read_csv, "npy": _read_numpy}
    # No extension filter: the format was decided from the spec, whatever the file is named.
    return readers[dataset.format](dataset.location, file_extensions=None, **_READ_REMOTE_ARGS)


def open_dataset_shards(datasets, world_size: int, storage_root: str | Path) -> list[dict[str, Any]]:
    """One {name: ray.data.DataIterator} per rank; rank r's iterators go to ctx.get_dataset_shard.

    Needs a connected Ray driver. Every rank must consume its iterator of a dataset in each
    epoch: streaming_split hands blocks out to all of them together.
    """
    if world_size < 1:
        raise InvalidArgument("spec.num_workers", f"must be >= 1 to split datasets, got {world_size}")
    shards: list[dict[str, Any]] = [{} for _ in range(world_size)]
    for dataset in resolve_datasets(datasets, storage_root):
        splits = read_dataset(dataset).streaming_split(world_size, equal=True)
        for rank, iterator in enumerate(splits):
            shards[rank][dataset.name] = iterator
    return shards
