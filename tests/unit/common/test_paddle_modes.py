"""tests/support/paddle_modes.py: a test that leaves Paddle in static mode fails by name, and the
next test of the same process runs in dynamic mode (what failed test_lost_store once in CI)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import paddle

from support.paddle_modes import static_mode_left_on

TESTS = Path(__file__).resolve().parents[2]

LEAKING = '''
import paddle

def test_leaks_static_mode():
    paddle.enable_static()

def test_next_one_builds_a_model_in_dynamic_mode():
    assert paddle.in_dynamic_mode()
    layer = paddle.nn.Linear(2, 1)
    assert layer(paddle.ones([1, 2])).shape == [1, 1]
'''


def test_static_mode_left_on_is_told_and_undone():
    assert not static_mode_left_on()
    paddle.enable_static()
    try:
        assert static_mode_left_on()
        assert paddle.in_dynamic_mode()
    finally:
        if not paddle.in_dynamic_mode():
            paddle.disable_static()


def test_a_leaking_test_fails_by_name_and_the_next_one_is_unharmed(tmp_path):
    # A test module of the suite's own tree shape (its conftest registers the fixture as
    # tests/conftest.py does), run by pytest in a fresh process.
    (tmp_path / "conftest.py").write_text("from support.paddle_modes import paddle_stays_dynamic  # noqa: F401\n")
    (tmp_path / "test_leak.py").write_text(LEAKING)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
         "-o", f"pythonpath={TESTS}", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    out = run.stdout
    assert "test_leak.py::test_leaks_static_mode left Paddle in static mode" in out, out[-3000:]
    # Both calls pass; the leaking one errors at teardown, and the run fails.
    assert "2 passed" in out and "1 error" in out and run.returncode == 1, out[-3000:]


def test_paddle_first_imported_off_the_main_thread_leaves_the_main_thread_static():
    """Why support.serving and support.exporter import Paddle on the main thread: the effect
    (Paddle 3.3) that made test_lost_store leave static mode on. If Paddle stops doing this,
    this test fails and import_on_main_thread can go."""
    script = ("import threading\n"
              "t = threading.Thread(target=lambda: __import__('paddle')); t.start(); t.join()\n"
              "import paddle\nprint('dynamic' if paddle.in_dynamic_mode() else 'static')\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": f"{TESTS.parent}:{TESTS}"})
    assert run.stdout.split() == ["static"], (run.stdout, run.stderr[-2000:])


def test_the_helpers_that_export_on_service_threads_import_paddle_on_the_main_thread():
    script = ("import sys, threading\nimport support.exporter\nassert 'paddle' in sys.modules\n"
              "import support.serving, tempfile, pathlib\n"
              "t = threading.Thread(target=lambda: support.serving.export_model(pathlib.Path(tempfile.mkdtemp()) / 'm'))\n"
              "t.start(); t.join()\nimport paddle\nprint('dynamic' if paddle.in_dynamic_mode() else 'static')\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": f"{TESTS.parent}:{TESTS}"})
    assert run.stdout.split() == ["dynamic"], (run.stdout, run.stderr[-2000:])
