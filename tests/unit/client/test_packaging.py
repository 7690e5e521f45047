"""The client's packaging: deterministic zips, .gitignore and excludes honoured, a size limit."""

from __future__ import annotations

import os
import zipfile
from io import BytesIO

import pytest

from paddleray.services.client.packaging import PackageError, build_package, package_files
from paddleray.services.common import packages

pytestmark = pytest.mark.unit


def _project(root):
    (root / "my_trainer").mkdir(parents=True)
    (root / "my_trainer" / "__init__.py").write_text("")
    (root / "my_trainer" / "train.py").write_text("def train(config, ctx):\n    pass\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    return root


def test_same_content_same_digest_whatever_the_timestamps(tmp_path):
    root = _project(tmp_path / "p")
    first = build_package(root)
    os.utime(root / "my_trainer" / "train.py", (1_000_000_000, 1_000_000_000))
    assert build_package(root).sha256 == first.sha256
    (root / "my_trainer" / "train.py").write_text("def train(config, ctx):\n    return 2\n")
    assert build_package(root).sha256 != first.sha256
    assert first.uri == packages.uri(first.sha256) and first.uri.startswith("paddleray://packages/sha256-")


def test_entries_sorted_with_fixed_times_and_permissions(tmp_path):
    package = build_package(_project(tmp_path / "p"))
    with zipfile.ZipFile(BytesIO(package.data)) as archive:
        infos = archive.infolist()
    assert [i.filename for i in infos] == ["my_trainer/__init__.py", "my_trainer/train.py", "run.sh"]
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
    modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in infos}
    assert modes == {"my_trainer/__init__.py": 0o644, "my_trainer/train.py": 0o644, "run.sh": 0o755}


def test_gitignore_files_default_and_caller_excludes(tmp_path):
    root = _project(tmp_path / "p")
    (root / ".gitignore").write_text("*.log\ndata/\n!keep.log\n")
    (root / "train.log").write_text("x")
    (root / "keep.log").write_text("x")
    (root / "data").mkdir()
    (root / "data" / "big.npy").write_text("x")
    (root / "my_trainer" / ".gitignore").write_text("secret.txt\n")
    (root / "my_trainer" / "secret.txt").write_text("x")
    (root / "secret.txt").write_text("only ignored below my_trainer/")
    (root / "my_trainer" / "__pycache__").mkdir()
    (root / "my_trainer" / "__pycache__" / "train.cpython-311.pyc").write_text("x")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("x")
    (root / "outputs").mkdir()
    (root / "outputs" / "ckpt.pdparams").write_text("x")
    assert package_files(root, excludes=["outputs/"]) == [
        ".gitignore", "keep.log", "my_trainer/.gitignore", "my_trainer/__init__.py", "my_trainer/train.py",
        "run.sh", "secret.txt",
    ]


def test_size_limit(tmp_path):
    root = _project(tmp_path / "p")
    (root / "weights.bin").write_bytes(os.urandom(50_000))
    with pytest.raises(PackageError, match="more than 10000 bytes"):
        build_package(root, max_bytes=10_000)
    assert len(build_package(root, max_bytes=100_000).data) > 50_000


def test_not_a_directory_or_nothing_to_ship(tmp_path):
    with pytest.raises(PackageError, match="not a directory"):
        build_package(tmp_path / "missing")
    (tmp_path / "empty" / "__pycache__").mkdir(parents=True)
    (tmp_path / "empty" / "__pycache__" / "x.pyc").write_text("x")
    with pytest.raises(PackageError, match="no files"):
        build_package(tmp_path / "empty")


@pytest.mark.parametrize(
    "module,files,inside",
    [
        ("my_trainer.train", ["my_trainer/train.py"], True),
        ("my_trainer", ["my_trainer/__init__.py"], True),
        ("fast", ["fast.cpython-311-x86_64-linux-gnu.so"], True),
        ("my_trainer.train", ["my_trainer/__init__.py"], False),
        ("my_trainer.train", ["other/my_trainer/train.py"], False),
        ("os", ["my_trainer/os.py"], False),
    ],
)
def test_module_file_in_package(module, files, inside):
    assert packages.module_file_in(module, files) is inside


def test_shadowing_top_level_modules():
    files = ["json.py", "logging/__init__.py", "test/helpers.py", "my_trainer/json.py", "fast.cpython-311.so", "README.md"]
    assert packages.shadowing_modules(files, ["json", "logging", "test", "fast", "os.path"]) == ["fast", "json", "logging"]
