"""common/storage.py, checkpoints and per-rank logs on a real S3 API server (moto's server mode,
tests/support/s3.py) through pyarrow's own S3 client, credentials and endpoint from the
environment as on a cluster. The same assertions run on a directory root, so both backends
behave alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from paddleray.services.common.checkpoints import MANIFEST, RetentionPolicy, checkpoint_store, read_checkpoint
from paddleray.services.common.storage import Storage, local_copy
from paddleray.services.trainer import logs
from paddleray.services.trainer.logs import LogReader, capture_output


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    return s3_server


@pytest.fixture(params=["directory", "s3"])
def root(request, tmp_path):
    if request.param == "directory":
        return str(tmp_path / "root")
    s3 = request.getfixturevalue("s3_env")
    return f"s3://{s3.new_bucket()}/cluster/a"


def test_files_round_trip(root, tmp_path):
    store = Storage.for_root(root)
    assert store.list_dir("") == [] and not store.exists("x") and store.size("x") is None
    store.write_atomically("runs/r1/run.json", b'{"a": 1}')
    store.write_atomically("runs/r1/run.json", b'{"a": 2}')  # replaced whole
    assert json.loads(store.read_text("runs/r1/run.json")) == {"a": 2}
    assert store.read_range("runs/r1/run.json", 2, 3) == b'a":' and store.read_range("runs/r1/run.json", 99, 1) == b""
    assert store.list_dir("") == ["runs"] and store.list_dir("runs") == ["r1"]
    with pytest.raises(FileNotFoundError):
        store.read_bytes("runs/none")
    (tmp_path / "up" / "sub").mkdir(parents=True)
    (tmp_path / "up" / "w.bin").write_bytes(b"\0" * 3000)
    (tmp_path / "up" / "sub" / "v.txt").write_text("v")
    store.upload_dir(tmp_path / "up", "models/m/1")
    store.download_dir("models/m/1", tmp_path / "down")
    assert (tmp_path / "down" / "w.bin").read_bytes() == b"\0" * 3000
    assert (tmp_path / "down" / "sub" / "v.txt").read_text() == "v"
    with pytest.raises(FileNotFoundError):
        store.download_dir("models/none", tmp_path / "nothing")
    store.delete("models")
    store.delete("models")  # absent: nothing
    assert store.list_dir("") == ["runs"]


def test_a_checkpoint_is_listed_only_once_its_manifest_is_written(root, tmp_path):
    checkpoints = f"{root}/runs/r1/checkpoints"
    store = checkpoint_store(checkpoints)
    source = tmp_path / "ckpt"
    source.mkdir()
    (source / "model.pdparams").write_bytes(b"weights-1")
    first = store.commit(source, step=10, epoch=1, metrics={"loss": 0.5})
    assert [c.step for c in store.list()] == [10] and read_checkpoint(first.path) == first
    # An upload cut short before its manifest: files there, no manifest -> not a checkpoint.
    raw = Storage.for_root(checkpoints)
    raw.write_atomically("step-000000020/model.pdparams", b"half")
    assert [c.step for c in store.list()] == [10] and store.latest() == first
    assert read_checkpoint(raw.location("step-000000020")) is None
    (source / "model.pdparams").write_bytes(b"weights-3")
    third = store.commit(source, step=30, epoch=3, metrics={"loss": 0.2}, policy=RetentionPolicy(keep_last=1))
    assert store.list() == [third], "retention kept the newest"
    assert not raw.exists("step-000000020"), "the incomplete upload was removed by the next commit"
    assert raw.list_dir("") == ["step-000000030"]
    assert set(raw.list_dir("step-000000030")) == {"model.pdparams", MANIFEST}
    # A retry on another node resumes from it through a local copy.
    local = local_copy(third.path)
    assert (local / "model.pdparams").read_bytes() == b"weights-3"


def test_per_rank_logs_are_uploaded_and_read_back(root, tmp_path):
    run_logs = f"{root}/runs/r1/logs"
    remote = "://" in run_logs  # on a directory root the rank writes there itself
    with capture_output(tmp_path / "node-logs" if remote else Path(run_logs), 0, run_logs if remote else None):
        for i in range(5):
            print(f"line {i}", flush=True)
    reader = LogReader(run_logs, [0])
    assert [line.text for line in reader.initial()] == [f"line {i}" for i in range(5)]
    assert [line.text for line in LogReader(run_logs, [0]).initial(tail_lines=2)] == ["line 3", "line 4"]
    assert reader.new_lines() == []


def test_a_log_goes_up_in_parts_and_each_round_uploads_only_what_grew(s3_env, tmp_path, monkeypatch):
    """A round used to PUT the whole file (the square of a log's size over a run); now at most
    the part that grew and the next one. Parts of 64 bytes here, of 8 MiB in a run."""
    monkeypatch.setattr(logs, "PART_BYTES", 64)
    monkeypatch.setattr(logs, "UPLOAD_INTERVAL_S", 3600.0)  # the rounds are this test's own
    uri = f"s3://{s3_env.new_bucket()}/c/runs/r1/logs"
    node = tmp_path / "node"
    node.mkdir()
    uploader = logs._Uploader(node, 0, uri)
    put: list[tuple[str, int]] = []
    storage = uploader._storage
    original = storage.write_atomically
    storage.write_atomically = lambda name, data: (put.append((name, len(data))), original(name, data))[1]
    path = logs.log_file(node, 0, "stdout")
    rounds = []
    for i in range(30):
        with open(path, "a") as f:
            f.write(f"{i}.5\tline {i:02d}\n")
        before = sum(n for _, n in put)
        uploader.upload()
        rounds.append(sum(n for _, n in put) - before)
    uploader.close()
    size = path.stat().st_size
    whole_file_cost = sum(len("".join(f"{j}.5\tline {j:02d}\n" for j in range(i + 1))) for i in range(30))
    assert max(rounds) <= 2 * 64 and sum(rounds) < whole_file_cost / 3, (rounds, whole_file_cost)

    parts = sorted((n for n in storage.list_dir("") if n.startswith("rank-0.stdout.log")),
                   key=lambda n: int(n.rsplit(".", 1)[1]) if n[-1].isdigit() else 0)
    assert len(parts) == -(-size // 64) and parts[0] == "rank-0.stdout.log", parts
    assert [storage.size(n) for n in parts[:-1]] == [64] * (len(parts) - 1)
    assert b"".join(storage.read_bytes(n) for n in parts) == path.read_bytes()
    reader = LogReader(uri, [0])
    assert [line.text for line in reader.initial()] == [f"line {i:02d}" for i in range(30)]
    assert [line.text for line in LogReader(uri, [0]).initial(tail_lines=3)] == ["line 27", "line 28", "line 29"]
    with open(path, "a") as f:
        f.write("99.5\tline 99\n")
    logs._Uploader(node, 0, uri).close()  # a fresh uploader (as after a restart) uploads it all again
    assert [line.text for line in reader.new_lines()] == ["line 99"]


def test_a_log_of_one_object_larger_than_a_part_reads_whole(tmp_path, monkeypatch):
    """A directory root's files, and logs an older trainer uploaded whole, are one object."""
    monkeypatch.setattr(logs, "PART_BYTES", 64)
    logs.log_file(tmp_path, 0, "stdout").write_text("".join(f"{i}.5\tline {i:02d}\n" for i in range(30)))
    assert [line.text for line in LogReader(str(tmp_path), [0]).initial()] == [f"line {i:02d}" for i in range(30)]
    assert [line.text for line in LogReader(str(tmp_path), [0]).initial(tail_lines=2)] == ["line 28", "line 29"]
