"""User code of the object-storage test (tests/e2e/multinode/test_object_storage.py), shipped by
the test, not the project.

`count_rows`: every rank reads its shard of the `train` dataset through ctx.get_dataset_shard
(an s3:// Parquet file) and reports how many rows, and the sum of their ids, it saw.
"""

from __future__ import annotations


def count_rows(config, ctx):
    rows = total = 0
    for batch in ctx.get_dataset_shard("train").iter_batches(batch_size=16, batch_format="numpy"):
        rows += len(batch["id"])
        total += int(batch["id"].sum())
    print(f"rank {ctx.rank} read {rows} rows", flush=True)
    ctx.report({"rows": rows, "id_sum": total})
