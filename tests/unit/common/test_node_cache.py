"""The node's cache of remote copies stays within its byte budget (common/node_cache.py):
least recently used entries go first, never the entry just published nor one used in its grace
time, and partial downloads a killed process left are swept after an hour."""

from __future__ import annotations

import os
import time

import pytest

from paddleray.services.common import node_cache

pytestmark = pytest.mark.unit


def _entry(base, kind, name, size, used_ago, now):
    path = base / kind / name
    path.mkdir(parents=True)
    (path / "weights").write_bytes(b"x" * size)
    os.utime(path, (now - used_ago, now - used_ago))
    return path


def test_least_recently_used_entries_go_until_the_cache_is_within_budget(tmp_path, monkeypatch):
    now = time.time()
    monkeypatch.setenv(node_cache.MAX_BYTES_ENV, "2500")
    oldest = _entry(tmp_path, "models", "a", 1000, 7200, now)
    older = _entry(tmp_path, "copies", "b", 1000, 3600, now)
    recent = _entry(tmp_path, "models", "c", 1000, 1800, now)
    new = _entry(tmp_path, "models", "d", 1000, 0, now)
    removed = node_cache.prune(tmp_path, keep=new, now=now)
    # 4,000 bytes over a 2,500 budget: the two least recently used go, across kinds.
    assert removed == [oldest, older]
    assert not oldest.exists() and not older.exists() and recent.is_dir() and new.is_dir()


def test_the_entry_just_published_and_entries_in_their_grace_time_stay_even_over_budget(tmp_path, monkeypatch, caplog):
    now = time.time()
    monkeypatch.setenv(node_cache.MAX_BYTES_ENV, "100")
    in_use = _entry(tmp_path, "models", "loading", 1000, node_cache.GRACE_S / 2, now)
    new = _entry(tmp_path, "packages", "just-published", 1000, node_cache.GRACE_S * 10, now)
    assert node_cache.prune(tmp_path, keep=new, now=now) == []
    assert in_use.is_dir() and new.is_dir()
    assert "over its budget" in caplog.text


def test_a_hit_marks_the_entry_used_so_it_outlives_older_ones(tmp_path, monkeypatch):
    now = time.time()
    monkeypatch.setenv(node_cache.MAX_BYTES_ENV, "1500")
    hit = _entry(tmp_path, "models", "hit", 1000, 7200, now)
    other = _entry(tmp_path, "models", "other", 1000, 3600, now)
    node_cache.touch(hit)
    assert node_cache.prune(tmp_path, now=time.time() + node_cache.GRACE_S + 1) == [other]
    assert hit.is_dir()


def test_stale_partial_downloads_are_swept_and_fresh_ones_left_to_their_writer(tmp_path):
    now = time.time()
    stale = _entry(tmp_path, "models", "k.1234abcd.partial", 10, node_cache.PARTIAL_MAX_AGE_S + 60, now)
    writing = _entry(tmp_path, "models", "k.9999abcd.partial", 10, 5, now)
    assert node_cache.prune(tmp_path, now=now) == [stale]
    assert writing.is_dir()


def test_package_zips_are_entries_too_and_other_kinds_are_not_pruned(tmp_path, monkeypatch):
    now = time.time()
    monkeypatch.setenv(node_cache.MAX_BYTES_ENV, "0")
    (tmp_path / "packages").mkdir()
    zip_file = tmp_path / "packages" / "sha256-ab.zip"
    zip_file.write_bytes(b"z" * 50)
    os.utime(zip_file, (now - 7200, now - 7200))
    run_scratch = _entry(tmp_path, "runs", "r1", 1000, 7200, now)
    assert node_cache.prune(tmp_path, now=now) == [zip_file]
    assert run_scratch.is_dir()


@pytest.mark.parametrize("value", ["lots", "-1", "1.5"])
def test_a_bad_budget_keeps_the_default_rather_than_failing_a_load(value, monkeypatch):
    monkeypatch.setenv(node_cache.MAX_BYTES_ENV, value)
    assert node_cache.max_bytes() == node_cache.DEFAULT_MAX_BYTES
