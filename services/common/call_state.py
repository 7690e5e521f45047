"""What one call of user code may leave in a warm worker, and how each call starts as on a fresh one.

A warm worker is reused by the next run of the same world size and environment (pool.py), and
user code runs in its process with no guard of its own. Checked, and what is done about each:

- Paddle's unique-name counters (`linear_0.w_0`, then `linear_1.w_0` for the next model built in
  the process): optimizer state is keyed by these names, so a checkpoint saved on a warm worker
  did not load on a fresh one, nor the reverse. Every call runs in a fresh name scope
  (paddle.utils.unique_name.guard), so every attempt sees the names a fresh worker gives.
- Paddle's modes: static graph mode (paddle.enable_static), the default dtype
  (paddle.set_default_dtype) and grad mode (paddle.set_grad_enabled(False)) are process-wide:
  each call starts dynamic, float32 and with grad on, as a fresh process does.
- Paddle's flags (paddle.set_flags): those a call changed are set back afterwards.
- The process environment: os.environ, the working directory and sys.path are set back to what
  they were before the call.
- The package's own modules: a fresh worker imports them for the first time, running their
  module-level code (a seed set at import, a registry filled, a counter); the modules loaded
  from the package's directory are dropped before each call, so they are imported anew.
  Installed modules (Paddle, numpy, the allowlisted code) stay: that is what a warm worker is for.
- The device is set per call by the worker (Paddle's expected place is per thread).
- Global random generators (Paddle's, numpy's, `random`) are left alone: a fresh process seeds
  each from the OS (two fresh workers draw different numbers), so a warm one is no less fresh;
  code that wants repeatable draws seeds them, at the call or at import (re-run, see above).
- Paddle's collective group is kept on purpose: a process can join one only once (pool.py).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def _flags(paddle: Any) -> dict[str, Any]:
    # The registry itself: paddle.get_flags refuses some of the names it lists.
    registry = paddle.base.core.globals()
    return {name: registry[name] for name in registry.keys()}


def _restore_flags(paddle: Any, before: dict[str, Any]) -> None:
    registry = paddle.base.core.globals()
    for name, value in _flags(paddle).items():
        if name in before and before[name] != value:
            try:
                registry[name] = before[name]
            except Exception:  # noqa: BLE001 - a flag Paddle does not let anyone set: keep going
                log.warning("could not set Paddle flag %s back to %r after the call", name, before[name])


def _fresh_import_flags(paddle: Any, environ: dict[str, str]) -> dict[str, Any]:
    """The flags as a fresh `import paddle` sets them: Paddle's defaults, except those the
    environment sets (FLAGS_<name> variables, read at import), which are left as they are."""
    registry = paddle.base.core.globals()
    return {name: registry.get_default(name) for name in registry.keys() if name not in environ}


def forget_modules_under(directory: Path) -> list[str]:
    """Drops from sys.modules every module loaded from `directory` (a package's unpacked
    directory); returns their names."""
    root = directory.resolve()
    dropped = []
    for name, module in list(sys.modules.items()):
        locations = [getattr(module, "__file__", None), *list(getattr(module, "__path__", None) or [])]
        paths = [Path(str(location)) for location in locations if location]
        if paths and all(_under(path, root) for path in paths):
            del sys.modules[name]
            dropped.append(name)
    importlib.invalidate_caches()
    return dropped


def _under(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root)
    except OSError:
        return False


def reset_modes(paddle: Any) -> None:
    """Paddle's process-wide modes as a fresh process has them."""
    if not paddle.in_dynamic_mode():
        paddle.disable_static()
    paddle.set_default_dtype("float32")
    paddle.set_grad_enabled(True)


@contextlib.contextmanager
def fresh_call(paddle: Any | None, package_dir: Path | None) -> Iterator[None]:
    """Runs the body as a first call on a fresh worker would run, and puts back what it changed.

    paddle: the module if the process imported it already, else None: then Paddle has no state
    to reset before the call (user code importing it gets a fresh one), and what the call
    changed is set back to what a fresh import gives."""
    environ, cwd, path = dict(os.environ), os.getcwd(), list(sys.path)
    flags = _flags(paddle) if paddle is not None else None
    if package_dir is not None:
        forget_modules_under(package_dir)
    scope: contextlib.AbstractContextManager = contextlib.nullcontext()
    if paddle is not None:
        reset_modes(paddle)
        scope = paddle.utils.unique_name.guard()
    try:
        with scope:
            yield
    finally:
        os.environ.clear()
        os.environ.update(environ)
        with contextlib.suppress(OSError):
            os.chdir(cwd)
        sys.path[:] = path
        imported = paddle or sys.modules.get("paddle")
        if imported is not None:
            # Imported by the call itself: put back what a fresh import gives.
            _restore_flags(imported, flags if flags is not None else _fresh_import_flags(imported, environ))
            reset_modes(imported)
