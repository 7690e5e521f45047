"""scikit-learn's digits as training data: packaged arrays, files for Ray Data, batch decoding.

The data set ships inside scikit-learn (1,797 8x8 images, 10 classes), so nothing is
downloaded. The split is fixed (seeded) so every rank, every resume and the bare benchmark
script see the same train and validation rows.

File layout written by `write_digits` and read back by `decode_batch`:
- parquet / csv: columns `pixel_00` .. `pixel_63` (float32, scaled to [0, 1]) and `label` (int64);
- npy: one float32 array of shape (n, 65): the 64 pixels, then the label (Ray Data's
  `read_numpy` gives it back as a single column named `data`).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

NUM_FEATURES = 64
NUM_CLASSES = 10
IMAGE_SHAPE = (1, 8, 8)
PIXEL_COLUMNS = [f"pixel_{i:02d}" for i in range(NUM_FEATURES)]
LABEL_COLUMN = "label"
FORMATS = ("parquet", "csv", "npy")


@lru_cache(maxsize=1)
def _load() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    # Pixel intensities are 0..16.
    features = (digits.data / 16.0).astype(np.float32)
    return features, digits.target.astype(np.int64)


def load_split(validation_fraction: float = 0.2, seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"train": (x, y), "validation": (x, y)}: a fixed, seeded split of the packaged data."""
    if not 0.0 < validation_fraction < 1.0:
        raise ValueError("validation_fraction must be in (0, 1)")
    features, labels = _load()
    order = np.random.default_rng(seed).permutation(len(labels))
    n_val = int(round(len(labels) * validation_fraction))
    val, train = order[:n_val], order[n_val:]
    return {"train": (features[train], labels[train]), "validation": (features[val], labels[val])}


def write_digits(directory: str | Path, fmt: str, split: str = "train", validation_fraction: float = 0.2) -> Path:
    """Writes one split of digits as a parquet, csv or npy file and returns its path."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}")
    features, labels = load_split(validation_fraction)[split]
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"digits_{split}.{fmt}"
    if fmt == "npy":
        np.save(path, np.concatenate([features, labels[:, None].astype(np.float32)], axis=1))
        return path
    import pyarrow as pa

    columns = {name: features[:, i] for i, name in enumerate(PIXEL_COLUMNS)}
    columns[LABEL_COLUMN] = labels
    table = pa.table(columns)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, path)
    else:
        import pyarrow.csv as pacsv

        pacsv.write_csv(table, path)
    return path


def decode_batch(batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(features float32 (n, 64), labels int64 (n,)) from a Ray Data numpy batch of either layout."""
    if "data" in batch:
        rows = np.asarray(batch["data"], dtype=np.float32)
        if rows.ndim != 2 or rows.shape[1] != NUM_FEATURES + 1:
            raise ValueError(f"npy digits rows must have {NUM_FEATURES + 1} columns, got shape {rows.shape}")
        return rows[:, :NUM_FEATURES], rows[:, NUM_FEATURES].astype(np.int64)
    missing = [c for c in (*PIXEL_COLUMNS, LABEL_COLUMN) if c not in batch]
    if missing:
        raise ValueError(f"digits batch lacks columns {missing[:3]}{'...' if len(missing) > 3 else ''}")
    features = np.stack([np.asarray(batch[c], dtype=np.float32) for c in PIXEL_COLUMNS], axis=1)
    return features, np.asarray(batch[LABEL_COLUMN], dtype=np.int64)
