"""Type-check services/ with mypy (`make lint` runs it; config: [tool.mypy] in pyproject.toml).

With paths (`typecheck.py bench`) it checks those instead: the benchmarks import the services
and nothing else runs them but their smoke test, which is slow to say an API moved under them.

The installed package maps paddleray.<service>.v1 to gen/python and paddleray.services to
services/ through setuptools' editable-install import hook, which mypy does not run. So this
lays out the same import tree as symlinks in a temporary directory (paddleray/ holding
gen/python/paddleray's entries and services/) and points mypy at it: the generated .pyi stubs
and the hand-written code are then checked together, as they are imported.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="paddleray-mypy-") as tree:
        package = Path(tree) / "paddleray"
        package.mkdir()
        for entry in (ROOT / "gen" / "python" / "paddleray").iterdir():
            (package / entry.name).symlink_to(entry)
        (package / "services").symlink_to(ROOT / "services")
        os.environ["MYPYPATH"] = tree
        out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), *sys.argv[1:]])
    # Paths in messages point into the temporary tree: show them as the repository's.
    for stream, text in ((sys.stdout, out), (sys.stderr, err)):
        stream.write(text.replace(f"{tree}/paddleray/services/", "services/"))
    return status


if __name__ == "__main__":
    sys.exit(main())
