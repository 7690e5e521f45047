"""The storage root's text (common/storage.py: check_root) and the directory backend; the
object-store backend against a real S3 API server: tests/integration/common/test_storage_s3.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from paddleray.services.common.settings import ServiceSettings
from paddleray.services.common.storage import LocalStorage, ObjectStorage, Storage, check_root, local_copy


@pytest.mark.parametrize("root, canonical", [
    ("s3://bucket-1/some/prefix/", "s3://bucket-1/some/prefix"),
    ("s3://bucket-1", "s3://bucket-1"),
    ("gs://my-bucket/p", "gs://my-bucket/p"),
    ("file:///srv/storage", "/srv/storage"),
    ("/srv/storage", "/srv/storage"),
])
def test_a_root_is_made_canonical(root, canonical):
    assert check_root(root) == canonical


@pytest.mark.parametrize("root, rule", [
    ("", "must not be empty"),
    ("ftp://host/x", "ftp:// is not a storage this service opens"),
    ("s3:///prefix", "names no bucket"),
    ("s3://Bucket_1/x", "is not an S3 bucket name"),
    ("s3://key:secret@bucket/x", "must not carry credentials"),
    ("s3://bucket/x?endpoint_override=http://h", "must not have ?options"),
    ("s3://bucket/a/../b", "'..' segments"),
])
def test_a_bad_root_is_refused_saying_why(root, rule):
    with pytest.raises(ValueError, match=rule.replace("?", r"\?").replace(".", r"\.")):
        check_root(root)


def test_the_settings_take_a_uri_and_refuse_a_bad_one_in_one_line(capsys):
    assert ServiceSettings(storage_root="s3://bucket-1/p/").storage_root == "s3://bucket-1/p"
    assert ServiceSettings(storage_root=Path("/x/y")).storage_root == "/x/y"
    with pytest.raises(SystemExit):
        ServiceSettings.for_main("paddleray-test", ["--storage-root", "s3://Bad_Bucket/x"])
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and line.startswith("paddleray-test: PADDLERAY_STORAGE_ROOT (--storage-root): ")
    assert "is not an S3 bucket name" in line


def test_every_service_takes_an_object_store_root():
    from paddleray.services.exporter.settings import ExporterSettings
    from paddleray.services.scheduler.settings import SchedulerSettings
    from paddleray.services.trainer.settings import TrainerSettings

    for settings in (TrainerSettings, SchedulerSettings, ExporterSettings):
        assert settings(storage_root="s3://bucket-1/p/").storage_root == "s3://bucket-1/p", settings.__name__


def test_for_root_picks_the_backend_and_survives_pickling():
    import pickle

    assert isinstance(Storage.for_root("/tmp/x"), LocalStorage)
    remote = pickle.loads(pickle.dumps(Storage.for_root("s3://bucket-1/p")))
    assert isinstance(remote, ObjectStorage) and remote.root == "s3://bucket-1/p"
    assert remote.location("runs/r1") == "s3://bucket-1/p/runs/r1"
    assert remote.relative("s3://bucket-1/p/runs/r1") == "runs/r1"
    assert remote.relative("s3://bucket-1/other/runs") is None
    assert remote.relative("s3://bucket-1/p/../q") is None


def test_the_directory_backend(tmp_path):
    store = Storage.for_root(tmp_path)
    store.write_atomically("a/b.txt", b"hello")
    assert store.read_bytes("a/b.txt") == b"hello" and store.size("a/b.txt") == 5
    assert store.read_range("a/b.txt", 1, 3) == b"ell" and store.read_range("a/b.txt", 9, 3) == b""
    assert store.list_dir("") == ["a"] and store.list_dir("a") == ["b.txt"] and store.list_dir("none") == []
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["b.txt"], "no temporary file is left"
    assert store.relative(str(tmp_path / "a" / "b.txt")) == "a/b.txt" and store.relative("/elsewhere") is None
    with pytest.raises(FileNotFoundError):
        store.read_bytes("missing")
    store.upload_dir(tmp_path / "a", "c")
    store.download_dir("c", tmp_path / "d")
    assert (tmp_path / "d" / "b.txt").read_bytes() == b"hello"
    assert local_copy(tmp_path / "d") == tmp_path / "d"
    store.delete("a")
    store.delete("missing")
    assert not store.exists("a") and store.exists("c/b.txt")
