"""Per-rank output capture at the fd level and incremental reading with tail."""

from __future__ import annotations

import os
import sys

import pytest

from paddleray.services.trainer.logs import LogReader, capture_output, log_file

pytestmark = pytest.mark.unit


def test_capture_takes_python_and_fd_level_output(tmp_path, capfd):
    with capture_output(tmp_path, rank=1):
        print("from python")
        print("to stderr", file=sys.stderr)
        os.write(1, b"from C code\n")
    print("after")  # back on the original stdout
    out = log_file(tmp_path, 1, "stdout").read_text().splitlines()
    assert [line.split("\t", 1)[1] for line in out] == ["from python", "from C code"]
    assert log_file(tmp_path, 1, "stderr").read_text().endswith("\tto stderr\n")
    assert "after" in capfd.readouterr().out


def test_reader_tails_per_rank_then_reads_only_new_complete_lines(tmp_path):
    for rank in (0, 1):
        log_file(tmp_path, rank, "stdout").write_text("".join(f"{rank}.{i}\tline {i}\n" for i in range(1, 5)))
    reader = LogReader(tmp_path, [0, 1])
    first = reader.initial(tail_lines=2)
    assert [(line.rank, line.text) for line in first] == [(0, "line 3"), (0, "line 4"), (1, "line 3"), (1, "line 4")]
    with open(log_file(tmp_path, 0, "stdout"), "a") as f:
        f.write("9.0\tline 5\n9.1\tpartial")
    assert [line.text for line in reader.new_lines()] == ["line 5"]
    with open(log_file(tmp_path, 0, "stdout"), "a") as f:
        f.write(" done\n")
    assert [line.text for line in reader.new_lines()] == ["partial done"]
    assert reader.new_lines() == []
    only_one = LogReader(tmp_path, [1]).initial()
    assert {line.rank for line in only_one} == {1} and len(only_one) == 4


@pytest.mark.parametrize("block", [3, 7, 64, 1 << 16])
def test_tail_reads_only_the_end_and_matches_reading_everything(tmp_path, monkeypatch, block):
    from paddleray.services.trainer import logs

    monkeypatch.setattr(logs, "_TAIL_BLOCK_BYTES", block)
    path = log_file(tmp_path, 0, "stdout")
    path.write_text("".join(f"{i}.0\tline {i} {'x' * (i % 5)}\n" for i in range(1, 40)) + "99.0\tpartial")
    everything = [line.text for line in LogReader(tmp_path, [0]).initial()]
    for n in (1, 2, 5, 39, 100):
        reader = LogReader(tmp_path, [0])
        assert [line.text for line in reader.initial(tail_lines=n)] == everything[-n:]
        with open(path, "a") as f:
            f.write(" done\n")
        assert [line.text for line in reader.new_lines()] == ["partial done"]
        path.write_text(path.read_text().removesuffix(" done\n"))


def test_batches_keep_messages_small_and_lines_in_order():
    from paddleray.services.trainer.logs import LogLine, next_batch

    lines = [LogLine(0, "stdout", "x" * 100, float(i)) for i in range(50)]
    remaining = iter(lines)
    cut = []
    while batch := next_batch(remaining, max_bytes=1000):
        cut.append(batch)
    assert [line for batch in cut for line in batch] == lines
    assert len(cut) > 1 and all(sum(len(line.text) for line in batch) <= 1000 for batch in cut)
    assert next_batch(iter([])) == []
    huge = [LogLine(0, "stdout", "y" * 5000, 0.0)]
    assert next_batch(iter(huge), max_bytes=1000) == huge, "a line longer than a batch still goes out"


def test_stream_merges_files_by_time_a_block_at_a_time(tmp_path, monkeypatch):
    from paddleray.services.trainer import logs

    monkeypatch.setattr(logs, "_READ_BLOCK_BYTES", 16)
    log_file(tmp_path, 0, "stdout").write_text("".join(f"{t}.0\tout {t}\n" for t in (1, 3, 5, 7)))
    log_file(tmp_path, 0, "stderr").write_text("".join(f"{t}.0\terr {t} {'z' * 40}\n" for t in (2, 3, 8)))
    reader = LogReader(tmp_path, [0])
    stream = reader.stream()
    assert next(stream).text == "out 1"
    assert [line.text.split()[:2] for line in stream] == [
        ["err", "2"], ["out", "3"], ["err", "3"], ["out", "5"], ["out", "7"], ["err", "8"],
    ]
    assert reader.new_lines() == []
