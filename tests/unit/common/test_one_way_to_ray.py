"""One way to touch Ray, checked over services/: in every module that imports Ray,
- threads are started only through services/common/ray_connection.py (`in_daemon_thread`,
  `free_in_daemon_thread`, `start_daemon_thread`), never with `asyncio.to_thread`,
  `loop.run_in_executor`, an executor or a bare `threading.Thread`: those are daemon threads that
  the connection tracks, so none holds up the process's exit and a driver calls `ray.shutdown()`
  only once they returned (or a bound passed). An executor thread blocked on a dead GCS kept the
  exporter from exiting, and a call returning across a shutdown landed in the next driver;
- Ray's private APIs (`ray._private`, `ray.serve._private`, `ray.data._internal`,
  `serve.context._get_global_client`, a handle option such as `_by_reference=`) are reached only
  through services/common/ray_private.py, whose tests (tests/unit/common/test_ray_private.py)
  fail loudly when a Ray upgrade moves one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SERVICES = Path(__file__).resolve().parents[3] / "services"
THREADS = "common/ray_connection.py"
PRIVATE = "common/ray_private.py"

# (module, name) pairs that start threads or hand work to an executor's threads.
THREAD_MAKERS = {("asyncio", "to_thread"), ("threading", "Thread"), ("concurrent.futures", "ThreadPoolExecutor")}
THREAD_METHODS = {"to_thread", "run_in_executor", "ThreadPoolExecutor"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _ray_names(tree: ast.AST) -> tuple[bool, set[str]]:
    """Whether the module imports Ray (anywhere, a function's lazy import too), and the local
    names its Ray imports bind (`ray`, `serve`, `context`, an alias)."""
    imports_ray, names = False, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "ray":
                    imports_ray = True
                    names.add(alias.asname or "ray")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ray" and not node.level:
            imports_ray = True
            names |= {alias.asname or alias.name for alias in node.names}
    return imports_ray, names


def _root(node: ast.expr) -> tuple[str, list[str]]:
    """The name an attribute chain starts from and its attributes: `serve.context._x` is
    ('serve', ['context', '_x'])."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    return (node.id if isinstance(node, ast.Name) else ""), attrs[::-1]


def _in_annotations(tree: ast.AST) -> set[int]:
    """ids of the nodes that only annotate a type (`self._thread: threading.Thread | None`)."""
    annotations = [n.annotation for n in ast.walk(tree) if isinstance(n, (ast.AnnAssign, ast.arg)) and n.annotation]
    annotations += [n.returns for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.returns]
    return {id(inner) for a in annotations for inner in ast.walk(a)}


def _thread_uses(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    annotating = _in_annotations(tree)
    for node in ast.walk(tree):
        if id(node) in annotating:
            continue
        if isinstance(node, ast.Attribute) and node.attr in THREAD_METHODS:
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Attribute) and node.attr == "Thread" and _root(node)[0] == "threading":
            found.append((node.lineno, "threading.Thread"))
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found += [(node.lineno, a.name) for a in node.names if (node.module, a.name) in THREAD_MAKERS]
    return found


def _private_uses(tree: ast.AST, ray_names: set[str]) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ray" and not node.level:
            module = node.module or ""
            if any(_private(part) for part in module.split(".")) or any(_private(a.name) for a in node.names):
                found.append((node.lineno, f"from {module} import ..."))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names
                      if a.name.split(".")[0] == "ray" and any(_private(p) for p in a.name.split("."))]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            root, attrs = _root(node)
            if root in ray_names and not isinstance(node.ctx, ast.Store):
                found.append((node.lineno, ".".join([root, *attrs])))
        elif isinstance(node, ast.Call):
            # Handle and actor options Ray keeps private (`.options(_by_reference=False)`).
            found += [(node.lineno, f"{k.arg}=") for k in node.keywords if k.arg and _private(k.arg)]
    return sorted(set(found))


def violations(relative: str, source: str) -> list[str]:
    """The module's breaches of the rules above, as "path:line: what"."""
    tree = ast.parse(source)
    imports_ray, ray_names = _ray_names(tree)
    if not imports_ray:
        return []
    found = []
    if relative != THREADS:
        found += [f"{relative}:{line}: {what} in a module that uses Ray (start threads through {THREADS}: "
                  "in_daemon_thread / start_daemon_thread)" for line, what in _thread_uses(tree)]
    if relative != PRIVATE:
        found += [f"{relative}:{line}: Ray private API {what} outside {PRIVATE}"
                  for line, what in _private_uses(tree, ray_names)]
    return found


def test_no_module_of_services_touches_ray_another_way():
    modules = sorted(SERVICES.rglob("*.py"))
    assert len(modules) > 50  # the tree was found
    using_ray = [p for p in modules if _ray_names(ast.parse(p.read_text()))[0]]
    assert len(using_ray) > 10, "the modules that import Ray were found"
    found = [v for path in modules for v in violations(str(path.relative_to(SERVICES)), path.read_text())]
    assert found == []


@pytest.mark.parametrize(("relative", "source", "rule"), [
    ("exporter/serving/control/controller.py", "import ray\nx = await asyncio.to_thread(serve.status)\n", "to_thread"),
    ("trainer/x.py", "import ray\nthreading.Thread(target=f, daemon=True).start()\n", "threading.Thread"),
    ("trainer/x.py", "import ray\nfrom threading import Thread\n", "Thread"),
    ("trainer/x.py", "import ray\nmake: type = threading.Thread\n", "threading.Thread"),
    ("trainer/x.py", "import ray\nfrom asyncio import to_thread as off\n", "to_thread"),
    ("trainer/x.py", "import ray\nloop.run_in_executor(None, ray.nodes)\n", "run_in_executor"),
    ("exporter/x.py", "from ray import serve\nc = serve.context._get_global_client()\n", "serve.context._get_global_client"),
    ("exporter/x.py", "def f():\n    from ray.serve import context\n    context._set_global_client(None)\n",
     "context._set_global_client"),
    ("trainer/x.py", "import ray\nfrom ray.data._internal.datasource import NumpyDatasource\n", "ray.data._internal"),
    ("trainer/x.py", "import ray\nfrom ray._private import worker\n", "ray._private"),
    ("trainer/x.py", "import ray\nimport ray._private.state as state\n", "ray._private.state"),
    ("trainer/x.py", "import ray\nw = ray._private.worker.global_worker\n", "ray._private outside"),
    ("exporter/x.py", "from ray import serve\nh = handle.options(_by_reference=False)\n", "_by_reference="),
    ("exporter/x.py", "from ray import serve\nserve.run(app, _check_exists=False)\n", "_check_exists="),
])
def test_a_planted_violation_is_found(relative, source, rule):
    found = violations(relative, source)
    line = source.count("\n")  # the violation is on the last line of each planted source
    assert len(found) == 1 and rule in found[0] and found[0].startswith(f"{relative}:{line}:"), found


def test_a_planted_violation_in_a_file_of_the_tree_is_found(tmp_path):
    """The same check as over services/, on a file written to disk as a module would be."""
    module = tmp_path / "planted.py"
    module.write_text("import asyncio\n\nimport ray\n\n\nasync def f():\n    return await asyncio.to_thread(ray.nodes)\n")
    assert violations("trainer/planted.py", module.read_text()) == [
        "trainer/planted.py:7: to_thread in a module that uses Ray (start threads through "
        "common/ray_connection.py: in_daemon_thread / start_daemon_thread)"]


def test_a_module_without_ray_may_use_threads_and_the_owners_may_do_what_they_reserve():
    assert violations("scheduler/packages.py", "import asyncio\nx = await asyncio.to_thread(f)\n") == []
    assert violations(THREADS, "import ray\nimport threading\nt = threading.Thread(target=f)\n") == []
    assert violations("trainer/x.py", "import ray\nt: threading.Thread | None = None\n") == [], "a type is no thread"
    assert violations(PRIVATE, "def f():\n    from ray._private import worker\n    return worker.global_worker\n") == []
    assert violations(THREADS, "import ray\nfrom ray._private import worker\n") != [], "threads' owner is not private's"
