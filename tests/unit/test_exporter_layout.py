"""The exporter's layout says where its code runs, and the code keeps to it (issue 22 point 5):
- every module under services/exporter opens its docstring with a "Runs in: ..." line naming
  where it runs (PLACES), and a module of a package with a home place (HOME: store/ runs in the
  exporter process, serving/replica/ in a Serve replica, export/task/ in the export Ray task)
  names that place;
- a module that runs anywhere but the exporter process (a Serve replica, the export Ray task, a
  Ray task on the head node) imports no module that runs only in the exporter process, at the
  top or in a function: a replica or a task would load the exporter's Redis stores, its settings
  or its Serve controller, in a process where they are neither configured nor meant to run.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

EXPORTER = Path(__file__).resolve().parents[2] / "services" / "exporter"
PACKAGE = "paddleray.services.exporter"
PROCESS = "the exporter process"
TASK = "the export Ray task"
REPLICA = "a Serve replica"
PLACES = (PROCESS, TASK, REPLICA, "a Ray task on the head node", "the process that starts a Ray node",
          "Serve's HAProxy start on a Ray node")
# The place every module of a folder runs in (besides others it may name); None: shared by both sides.
HOME = {
    "": PROCESS, "store": PROCESS, "registry": PROCESS, "export": PROCESS, "deploy": PROCESS,
    "serving/control": PROCESS, "export/task": TASK, "serving/replica": REPLICA, "serving": None,
}
PREFIX = "Runs in: "


@dataclass(frozen=True)
class Module:
    path: str  # relative to services/exporter
    line: str | None  # the docstring's "Runs in:" line
    places: frozenset[str]
    imports: frozenset[str]  # dotted names it imports, and dotted name + "." + each name it takes from one

    @property
    def dotted(self) -> str:
        parts = self.path.removesuffix(".py").split("/")
        return ".".join([PACKAGE, *(parts[:-1] if parts[-1] == "__init__" else parts)])

    @property
    def folder(self) -> str:
        return self.path.rpartition("/")[0]


def parse(path: str, source: str) -> Module:
    tree = ast.parse(source)
    first = (ast.get_docstring(tree) or "").split("\n", 1)[0]
    line = first if first.startswith(PREFIX) else None
    imports: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if node.level:  # relative: from the module's own package
                package = Module(path, None, frozenset(), frozenset()).dotted.split(".")
                package = package if path.endswith("__init__.py") else package[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + [node.module])
            imports |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return Module(path, line, frozenset(p for p in PLACES if line and p in line), frozenset(imports))


def modules(root: Path = EXPORTER, planted: dict[str, str] | None = None) -> dict[str, Module]:
    sources = {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*.py"))}
    sources.update(planted or {})
    found = [parse(path, source) for path, source in sources.items()]
    return {m.dotted: m for m in found}


def problems(found: dict[str, Module]) -> list[str]:
    out = []
    for m in found.values():
        if m.line is None:
            out.append(f"{m.path}: its docstring does not open with '{PREFIX}<where it runs>.'")
            continue
        if m.path.endswith("__init__.py"):
            continue  # a package's file holds nothing: it runs wherever its modules do
        if not m.places:
            out.append(f"{m.path}: '{m.line}' names none of {PLACES}")
        elif (home := HOME.get(m.folder, PROCESS)) and home not in m.places:
            out.append(f"{m.path}: lives in {m.folder or '.'}/, whose modules run in {home}, but says '{m.line}'")
    for m in found.values():
        if not m.places or m.places == {PROCESS}:
            continue
        for name in sorted(m.imports):
            target = found.get(name)
            if target is not None and target.places == {PROCESS}:
                out.append(f"{m.path} runs in {', '.join(sorted(m.places - {PROCESS}))} but imports {target.path}, "
                           f"which runs only in {PROCESS}")
    return out


def test_every_exporter_module_says_where_it_runs_and_imports_only_what_runs_there():
    found = modules()
    assert len(found) > 50 and any(m.folder == "serving/replica" for m in found.values())  # the tree was read
    assert problems(found) == []


_REPLICA = "serving/replica/dataplane.py"
_TASK = "export/task/validate.py"
_DOC = '"""Runs in: a Serve replica.\n\nA planted module.\n"""\n'


@pytest.mark.parametrize(("path", "source", "says"), [
    (_REPLICA, _DOC + "from paddleray.services.exporter.store.registry_store import RegistryStore\n",
     "serving/replica/dataplane.py runs in a Serve replica but imports store/registry_store.py"),
    (_REPLICA, _DOC + "def f():\n    from paddleray.services.exporter.serving.control import controller\n",
     "imports serving/control/controller.py"),
    (_REPLICA, _DOC + "import paddleray.services.exporter.settings\n", "imports settings.py"),
    (_TASK, '"""Runs in: the export Ray task.\n"""\nfrom paddleray.services.exporter.deploy import reconciler\n',
     "export/task/validate.py runs in the export Ray task but imports deploy/reconciler.py"),
    (_REPLICA, '"""The v2 data plane, with no line saying where it runs."""\n', "does not open with 'Runs in: "),
    ("serving/replica/x.py", '"""Runs in: the exporter process.\n"""\n', "whose modules run in a Serve replica"),
    ("deploy/x.py", '"""Runs in: somewhere.\n"""\n', "names none of"),
])
def test_a_planted_violation_is_found(path, source, says):
    found = problems(modules(planted={path: source}))
    assert len(found) == 1 and says in found[0], found


def test_what_the_rule_allows_passes():
    # A replica module may use the shared serving modules and services/common; the exporter
    # process may use replica modules (the controller hands Serve their import paths).
    allowed = {
        _REPLICA: _DOC + "from paddleray.services.exporter.serving import artifact, spec\n"
                         "from paddleray.services.common import names\n",
        "deploy/x.py": '"""Runs in: the exporter process.\n"""\nfrom paddleray.services.exporter.serving.replica import codec\n',
    }
    assert problems(modules(planted=allowed)) == []
