"""`-m unit`, `-m integration`, `-m e2e`, `-m reliability` (and the markers within them) select
every test between them: tests/conftest.py marks each test by its directory and stops the
collection on a test outside them or marked with another directory's category.

Seven modules once carried no marker, and `-m integration` skipped four of the eight serving
modules without a word.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TESTS = Path(__file__).resolve().parents[1]
EVERY_MARKER = "unit or integration or e2e or reliability or stack_loop or bench_smoke"


def _collect(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                          cwd=root, capture_output=True, text=True, timeout=300)


def test_the_category_markers_together_select_every_test_of_the_tree():
    result = _collect(TESTS.parent, "-m", f"not ({EVERY_MARKER})")
    # Exit code 5: nothing selected. The deselected are all of them (over a thousand today).
    assert result.returncode == 5, result.stdout[-3000:] + result.stderr[-3000:]
    deselected = re.search(r"(\d+) deselected", result.stdout)
    assert deselected and int(deselected.group(1)) > 1000, result.stdout[-2000:]


def test_a_test_outside_the_category_directories_or_marked_across_them_stops_the_collection(tmp_path):
    tests = tmp_path / "tests"
    for directory in ("unit", "integration", "misc"):
        (tests / directory).mkdir(parents=True)
    shutil.copy(TESTS / "conftest.py", tests / "conftest.py")
    # The conftest imports the repository's tests/support (its autouse fixtures): on the path.
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = --import-mode=importlib\n"
                                         f"pythonpath = {TESTS}\n"
                                         "markers =\n    unit\n    integration\n    e2e\n    reliability\n")
    plain = "def test_it():\n    pass\n"
    (tests / "unit" / "test_placed.py").write_text(plain)
    (tests / "misc" / "test_nowhere.py").write_text(plain)
    (tests / "integration" / "test_crossed.py").write_text(textwrap.dedent("""
        import pytest

        pytestmark = pytest.mark.e2e

        def test_it():
            pass
    """))
    result = _collect(tmp_path, "tests")
    assert result.returncode == 4, result.stdout + result.stderr  # a usage error
    refused = (result.stdout + result.stderr).split("each test's category is its directory", 1)[1]
    assert "tests/misc/test_nowhere.py::test_it (not under tests/{unit,integration,e2e,reliability}/)" in refused
    assert "tests/integration/test_crossed.py::test_it (in integration, marked ['e2e'])" in refused
    assert "test_placed" not in refused
    (tests / "misc" / "test_nowhere.py").unlink()
    (tests / "integration" / "test_crossed.py").unlink()
    placed = _collect(tmp_path, "tests", "-m", "unit")
    assert placed.returncode == 0 and "tests/unit/test_placed.py::test_it" in placed.stdout
