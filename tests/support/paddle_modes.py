"""Paddle's static graph mode leaks between tests of one pytest process: a test that turns it on
(paddle.enable_static(), directly or through code it calls) and leaves it on breaks later tests
that build or export a model in dynamic mode. tests/reliability/test_lost_store.py failed so
once in CI, far from where it came from.

Found by the fixture below: test_lost_store itself left the main thread static. Paddle's mode is
per thread, and a thread takes its first mode from a process-wide value that Paddle leaves at
"static" when Paddle is first imported on a thread other than the main one: then every other
thread, the main one included, starts static. test_lost_store exported its model
(support.exporter.servable_version -> support.serving.export_model) on the in-process
exporter's event-loop thread, the first import of Paddle in that process
(test_paddle_modes.py shows the effect). So the test helpers that run Paddle on such threads
import it where they are imported, on the main thread (`import_on_main_thread`).

`paddle_stays_dynamic` (autouse, registered by tests/conftest.py for every test) fails the test
that leaves static mode on, by name, and turns dynamic mode back on, so no later test is hit.
Tests that never import Paddle pay nothing: Paddle is only looked at when already imported.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest


def import_on_main_thread() -> None:
    """Imports Paddle now, if not yet imported, when called on the main thread (a module's import
    at collection is): see above why its first import must not be on another thread."""
    if "paddle" not in sys.modules and threading.current_thread() is threading.main_thread():
        import paddle  # noqa: F401


def static_mode_left_on() -> bool:
    """Whether this process's Paddle (if imported) is in static mode; if so, dynamic mode is
    turned back on before this returns."""
    paddle = sys.modules.get("paddle")
    if paddle is None or not hasattr(paddle, "in_dynamic_mode") or paddle.in_dynamic_mode():
        return False
    paddle.disable_static()
    return True


@pytest.fixture(autouse=True)
def paddle_stays_dynamic(request) -> Iterator[None]:
    yield
    if static_mode_left_on():
        pytest.fail(f"{request.node.nodeid} left Paddle in static mode (paddle.enable_static() with no "
                    "paddle.disable_static() after it); dynamic mode is turned back on for the next tests",
                    pytrace=False)
