"""No service imports another's internals, checked over services/.

A module of services/<a> may import from services/<b> (b another package, not common/) only
what ALLOWED lists as b's public surface for a, and never an underscore name of any other
package, common/ included (imported by name, or reached as an attribute of an imported
module). Rules two services share (durable file writes, the checkpoint layout, labels, GPU
env, v2 datatypes, resource amounts) live in services/common/: the exporter once fsynced its
artifacts with the trainer's private _fsync_tree / _write_atomically.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SERVICES = Path(__file__).resolve().parents[2] / "services"
PREFIX = "paddleray.services."
# importer package -> the modules (and their submodules) of other packages it may import.
ALLOWED: dict[str, tuple[str, ...]] = {
    # The CLI is a client: the SDK, the local stack it starts, the examples its demo trains.
    "cli": ("paddleray.services.client", "paddleray.services.localstack", "paddleray.services.trainer.examples"),
    # The SDK routes v2 calls to the inference server application by the name Serve knows it by.
    "client": ("paddleray.services.exporter.serving.control.serve_config",),
    # The settings reference lists the settings classes of every service.
    "common": ("paddleray.services.exporter.settings", "paddleray.services.scheduler.settings",
               "paddleray.services.trainer.settings"),
    # The local stack starts the Ray head with the environment Serve's HAProxy needs on a node.
    "localstack": ("paddleray.services.exporter.serving.node_env",),
}


def _package(module: str) -> str:
    return module[len(PREFIX):].split(".")[0] if module.startswith(PREFIX) else ""


def _allowed(importer: str, module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in ALLOWED.get(importer, ()))


def violations(relative: str, source: str) -> list[str]:
    """The module's breaches of the rule above, as "path:line: what"."""
    importer = relative.split("/")[0]
    found: list[str] = []
    foreign_modules: set[str] = set()  # local names bound to a module of another package
    tree = ast.parse(source)
    for node in ast.walk(tree):
        imported: list[tuple[str, list[ast.alias]]] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported = [(node.module, node.names)]
        elif isinstance(node, ast.Import):
            imported = [(a.name, [a]) for a in node.names]
        for module, aliases in imported:
            package = _package(module)
            if not package or package == importer:
                continue
            if package != "common" and not _allowed(importer, module):
                found.append(f"{relative}:{node.lineno}: imports {module}, an internal of services/{package}")
                continue
            for alias in aliases if isinstance(node, ast.ImportFrom) else ():
                if alias.name.startswith("_"):
                    found.append(f"{relative}:{node.lineno}: imports {module}.{alias.name}, a private name")
                else:
                    foreign_modules.add(alias.asname or alias.name)
            if isinstance(node, ast.Import):
                foreign_modules.add(aliases[0].asname or module.split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if isinstance(node.value, ast.Name) and node.value.id in foreign_modules:
                found.append(f"{relative}:{node.lineno}: uses {node.value.id}.{node.attr}, a private name")
    return found


def test_no_service_imports_another_services_internals():
    found = []
    for path in sorted(SERVICES.rglob("*.py")):
        relative = path.relative_to(SERVICES).as_posix()
        if "/" in relative and not relative.endswith("_pb2.py"):
            found += violations(relative, path.read_text())
    assert not found, "\n".join(found)


@pytest.mark.parametrize(("relative", "source", "says"), [
    ("exporter/export/task/export_task.py", "from paddleray.services.trainer.checkpoints import fsync_tree\n",
     "an internal of services/trainer"),
    ("exporter/export/task/export_task.py", "import paddleray.services.scheduler.validation\n", "an internal of services/scheduler"),
    ("trainer/worker.py", "from paddleray.services.common.files import _helper\n", "a private name"),
    ("exporter/x.py", "from paddleray.services.common import files as f\nf._fsync(1)\n", "uses f._fsync"),
    ("client/x.py", "from paddleray.services.exporter.serving.control.serve_config import _APPS\n", "a private name"),
    ("client/x.py", "from paddleray.services.exporter.serving.control.controller import ServingController\n",
     "an internal of services/exporter"),
])
def test_a_planted_breach_is_found(relative, source, says):
    (found,) = violations(relative, source)
    assert says in found and found.startswith(f"{relative}:")


def test_what_the_rule_allows_passes():
    assert violations("cli/x.py", "from paddleray.services.trainer.examples import digits_data\n") == []
    assert violations("exporter/x.py", "from paddleray.services.exporter.store.registry_store import _private\n") == []
    assert violations("exporter/x.py", "from paddleray.services.common import files\nfiles.fsync_dir(1)\n") == []
