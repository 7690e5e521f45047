"""Exported versions on an object-store root (issue 23, point 4), against a real S3 API server
(moto's server mode, tests/support/s3.py), credentials in the environment as on a cluster.

The export task runs in process as the Ray task would run it: it reads a checkpoint committed
to the store, uploads the version's files and its manifest last, and validates the staged
copy. A Serve replica's loader (serving/artifact.load_artifact, through common/model_cache)
then reads the version from the store into its node's cache, checked against the manifest's
digests; a version without its manifest (an export cut short) and one whose files differ from
what the manifest says are refused, never served.
"""

from __future__ import annotations

import numpy as np
import pytest

from paddleray.services.common import model_manifest
from paddleray.services.common.checkpoints import checkpoint_store
from paddleray.services.common.errors import FailedPrecondition
from paddleray.services.common.storage import Storage
from paddleray.services.exporter.export.task import export_task
from paddleray.services.exporter.export.task.export_records import Exported, ExportRequest, Validated, ValidationOptions
from paddleray.services.exporter.serving.artifact import load_artifact
from paddleray.services.exporter.serving.replica.predictor import PredictorOptions, load_predictor
from paddleray.services.trainer.examples import digits_mlp, loop

pytestmark = pytest.mark.integration
BUILDER = "paddleray.services.trainer.examples.digits_mlp:build_model"


@pytest.fixture
def root(s3_server, monkeypatch, tmp_path):
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PADDLERAY_CACHE_DIR", str(tmp_path / "cache"))
    return f"s3://{s3_server.new_bucket()}/cluster"


def _checkpoint(root: str, tmp_path) -> str:
    import paddle

    with paddle.utils.unique_name.guard():
        model = digits_mlp.build_model({"hidden_sizes": [8]})
    staged = tmp_path / "staged"
    staged.mkdir()
    paddle.save(model.state_dict(), str(staged / loop.MODEL_FILE))
    return str(checkpoint_store(f"{root}/runs/r1/checkpoints").commit(staged, step=3, epoch=1, metrics={}).path)


def _export(root: str, tmp_path, number: int = 1) -> tuple[str, Exported, Validated]:
    version_dir = f"{root}/models/m/versions/{number}"
    request = ExportRequest(builder=BUILDER, checkpoint_dir=_checkpoint(root, tmp_path), config={"hidden_sizes": [8]},
                            version_dir=version_dir, model="models/m", version=f"models/m/versions/{number}",
                            validation=ValidationOptions())
    exported, validated = list(export_task.run_export(request))
    assert isinstance(exported, Exported) and isinstance(validated, Validated), (exported, validated)
    return version_dir, exported, validated


def test_an_export_writes_its_version_to_the_store_manifest_last_and_a_replica_serves_it(root, s3_server, tmp_path):
    version_dir, exported, validated = _export(root, tmp_path)
    assert exported.version_dir == version_dir and validated.passed, validated
    bucket = root.removeprefix("s3://").split("/")[0]
    prefix = "cluster/models/m/versions/1/"
    keys = {k for k in s3_server.keys(bucket, prefix) if not k.endswith("/")}  # pyarrow's directory markers aside
    assert keys == {prefix + p for p in ("manifest.json", "paddle/inference.json", "paddle/inference.pdiparams")}, keys
    manifest = model_manifest.Manifest.load(version_dir)
    assert manifest == exported.manifest and set(manifest.files) == {"paddle/inference.json", "paddle/inference.pdiparams"}
    assert not list((tmp_path / "cache" / "exports").iterdir()), "the staged copy is removed after validation"
    assert exported.sizes["paddle"] > 0

    artifact = load_artifact(version_dir)
    assert artifact.root.is_relative_to(tmp_path / "cache" / "models")
    assert model_manifest.file_digests(artifact.root) == manifest.files
    predictor = load_predictor(artifact, "paddle", PredictorOptions())
    x = np.random.default_rng(0).random((2, 64), np.float32)
    (output,) = predictor.predict({"x": x}).values()
    assert np.asarray(output).shape == (2, 10)
    assert load_artifact(version_dir).root == artifact.root, "one copy per version on a node"


def test_a_version_without_its_manifest_or_with_other_files_is_not_served(root, tmp_path):
    version_dir, _, _ = _export(root, tmp_path)
    store = Storage.for_root(root)
    # Cut short: the files uploaded, the manifest not yet (what an export killed mid-upload leaves).
    store.download_dir("models/m/versions/1", tmp_path / "copy")
    (tmp_path / "copy" / "manifest.json").unlink()
    store.upload_dir(tmp_path / "copy", "models/m/versions/2")
    half = f"{root}/models/m/versions/2"
    assert not model_manifest.exists(half)
    with pytest.raises(FailedPrecondition, match="no manifest.json"):
        load_artifact(half)

    # Complete, but a file is not the one the manifest names.
    store.upload_dir(tmp_path / "copy", "models/m/versions/3")
    store.write_atomically("models/m/versions/3/manifest.json", store.read_bytes("models/m/versions/1/manifest.json"))
    store.write_atomically("models/m/versions/3/paddle/inference.pdiparams", b"\0" * 64)
    with pytest.raises(FailedPrecondition, match="inference.pdiparams does not match the SHA-256"):
        load_artifact(f"{root}/models/m/versions/3")
    assert not [p for p in (tmp_path / "cache" / "models").iterdir() if p.name.endswith(".partial")]
    assert len(list((tmp_path / "cache" / "models").iterdir())) == 0, "nothing refused is kept in the cache"


def test_the_nodes_model_copies_stay_within_the_cache_budget_least_recently_used_first(root, tmp_path, monkeypatch):
    """Versions copied to a node are pruned beyond PADDLERAY_CACHE_MAX_BYTES (common.node_cache):
    the least recently used copy goes once it is past its grace time; it is fetched again, checked
    against its manifest, when a replica needs it again."""
    import os

    from paddleray.services.common import node_cache

    first_dir, _, _ = _export(root, tmp_path, number=1)
    (tmp_path / "second").mkdir()
    second_dir, _, _ = _export(root, tmp_path / "second", number=2)
    first = load_artifact(first_dir).root
    size = sum(f.stat().st_size for f in first.rglob("*") if f.is_file())
    monkeypatch.setenv(node_cache.MAX_BYTES_ENV, str(int(size * 1.5)))  # room for one copy
    long_ago = first.stat().st_mtime - node_cache.GRACE_S - 60
    os.utime(first, (long_ago, long_ago))
    second = load_artifact(second_dir).root
    assert second.is_dir() and not first.exists(), "the older copy goes when the newer is published"
    again = load_artifact(first_dir).root
    assert again == first and model_manifest.file_digests(again) == model_manifest.Manifest.load(first_dir).files
    assert second.is_dir(), "a copy in its grace time stays, though the cache is now over budget"
