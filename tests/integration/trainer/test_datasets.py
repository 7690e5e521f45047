"""Datasets split across ranks with Ray Data on the shared Ray: disjoint shards covering the data."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import ray

from paddleray.common.v1 import common_pb2
from paddleray.services.common.errors import InvalidArgument
from paddleray.services.trainer.datasets import open_dataset_shards, resolve_datasets
from paddleray.services.trainer.examples import digits_data

pytestmark = pytest.mark.integration

ROWS = 1001


@ray.remote(num_cpus=1)
class Rank:
    """Holds a CPU like a trainer rank does, so the test also shows reads do not wait for CPUs."""

    def consume(self, iterator, column: str) -> list[int]:
        ids = []
        for batch in iterator.iter_batches(batch_size=64, batch_format="numpy"):
            values = batch[column]
            ids.extend(int(v) for v in (values[:, 0] if values.ndim == 2 else values))
        return ids


def _write_ids(root, fmt: str) -> str:
    ids = np.arange(ROWS, dtype=np.int64)
    if fmt == "npy":
        np.save(root / "ids.npy", np.stack([ids, ids * 2], axis=1))
        return "ids.npy"
    table = pa.table({"id": ids, "twice": ids * 2})
    if fmt == "parquet":
        pq.write_table(table, root / "ids.parquet", row_group_size=100)
        return "ids.parquet"
    pacsv.write_csv(table, root / "ids.csv")
    return "ids.csv"


@pytest.mark.parametrize("fmt", ["parquet", "csv", "npy"])
def test_each_rank_gets_a_disjoint_equal_shard_covering_the_data(ray_cluster, tmp_path, fmt):
    uri = _write_ids(tmp_path, fmt)
    shards = open_dataset_shards([common_pb2.Dataset(name="train", uri=uri)], 2, tmp_path)
    assert [list(s) for s in shards] == [["train"], ["train"]]

    ranks = [Rank.remote() for _ in range(2)]
    column = "data" if fmt == "npy" else "id"
    got = ray.get([r.consume.remote(s["train"], column) for r, s in zip(ranks, shards, strict=True)], timeout=180)

    assert len(got[0]) == len(got[1]) == ROWS // 2
    assert not set(got[0]) & set(got[1])
    assert len(set(got[0]) | set(got[1])) == ROWS - 1  # equal=True drops the odd row out
    for actor in ranks:
        ray.kill(actor)


@pytest.mark.parametrize("fmt", digits_data.FORMATS)
def test_digits_files_read_back_as_the_packaged_split(ray_cluster, tmp_path, fmt):
    path = digits_data.write_digits(tmp_path, fmt, split="validation")
    [shards] = open_dataset_shards([common_pb2.Dataset(name="validation", uri=path.name)], 1, tmp_path)
    batches = [digits_data.decode_batch(b) for b in shards["validation"].iter_batches(batch_format="numpy")]
    features = np.concatenate([b[0] for b in batches])
    labels = np.concatenate([b[1] for b in batches])
    want_x, want_y = digits_data.load_split()["validation"]
    np.testing.assert_allclose(features, want_x, atol=1e-6)
    np.testing.assert_array_equal(labels, want_y)


def test_format_from_the_enum_overrides_the_suffix(tmp_path):
    (tmp_path / "data.bin").write_bytes(b"")
    [resolved] = resolve_datasets(
        [common_pb2.Dataset(name="t", uri="data.bin", format=common_pb2.DATASET_FORMAT_CSV)], tmp_path
    )
    assert resolved.format == "csv"
    assert resolved.location == str((tmp_path / "data.bin").resolve())


@pytest.mark.parametrize(
    ("dataset", "field", "rule"),
    [
        (common_pb2.Dataset(name="t", uri="missing.parquet"), "spec.datasets[0].uri", "no such file"),
        (common_pb2.Dataset(name="t", uri="data.txt"), "spec.datasets[0].format", "must be set"),
        (common_pb2.Dataset(name="t", uri="../outside.csv"), "spec.datasets[0].uri", "under the storage root"),
        (common_pb2.Dataset(name="t", uri="/etc/passwd", format=common_pb2.DATASET_FORMAT_CSV),
         "spec.datasets[0].uri", "under the storage root"),
        (common_pb2.Dataset(name="", uri="data.txt"), "spec.datasets[0].name", "must not be empty"),
        (common_pb2.Dataset(name="t", uri=""), "spec.datasets[0].uri", "must not be empty"),
        (common_pb2.Dataset(name="t", uri="nope://bucket/x.csv"), "spec.datasets[0].uri", "cannot open"),
    ],
)
def test_bad_datasets_are_invalid_arguments_naming_the_field(tmp_path, dataset, field, rule):
    (tmp_path / "data.txt").write_text("x\n")
    (tmp_path.parent / "outside.csv").write_text("x\n")
    with pytest.raises(InvalidArgument) as error:
        resolve_datasets([dataset], tmp_path)
    assert error.value.field == field
    assert rule in error.value.rule


def test_repeated_names_are_rejected(tmp_path):
    (tmp_path / "a.csv").write_text("x\n1\n")
    twice = [common_pb2.Dataset(name="train", uri="a.csv")] * 2
    with pytest.raises(InvalidArgument, match=r"spec.datasets\[1\].name: must be unique"):
        resolve_datasets(twice, tmp_path)


def test_unreadable_file_is_an_invalid_argument(tmp_path):
    (tmp_path / "broken.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(InvalidArgument, match=r"spec.datasets\[0\].uri: cannot read as parquet"):
        open_dataset_shards([common_pb2.Dataset(name="t", uri="broken.parquet")], 2, tmp_path)


def test_npy_of_another_format_is_an_invalid_argument(tmp_path):
    (tmp_path / "broken.npy").write_text("id\n1\n")
    with pytest.raises(InvalidArgument, match=r"spec.datasets\[0\].uri: cannot read as npy"):
        resolve_datasets([common_pb2.Dataset(name="t", uri="broken.npy")], tmp_path)


def test_local_names_with_spaces_resolve_and_pass_the_header_check(tmp_path):
    (tmp_path / "my data").mkdir()
    pq.write_table(pa.table({"id": [1, 2]}), tmp_path / "my data" / "ids 1.parquet")
    [resolved] = resolve_datasets([common_pb2.Dataset(name="t", uri="my data/ids 1.parquet")], tmp_path)
    assert resolved.format == "parquet"
    assert resolved.location.endswith("my data/ids 1.parquet")
