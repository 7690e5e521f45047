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
