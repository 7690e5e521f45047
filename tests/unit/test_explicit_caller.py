"""Only servicers read the caller of a call; every other module is given it, checked over services/.

The interceptors set the call's caller in a contextvar (common/identity.py: set_current,
acting_as), and a servicer reads it once (of_call) and passes it down as an argument named
`caller`. A domain module that read the contextvar itself could act for a caller nobody passed
it: JobInputs.prepare once called of_call(), and a sweep's trials reached it inside an
acting_as(LOCAL) block rather than by an argument saying so.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SERVICES = Path(__file__).resolve().parents[2] / "services"
CONTEXT_CALLS = frozenset({"of_call", "acting_as", "set_current"})
# The module that defines the contextvar, and the one that sets it for each call.
ALLOWED_MODULES = frozenset({"common/identity.py", "common/interceptors.py"})


def reads_the_caller(relative: str) -> bool:
    """Whether the module may use CONTEXT_CALLS: servicers, and the two modules above."""
    name = relative.rsplit("/", 1)[-1]
    return relative in ALLOWED_MODULES or name == "servicer.py" or name.endswith("_servicer.py")


def violations(relative: str, source: str) -> list[str]:
    """Each use of CONTEXT_CALLS in the module, as "path:line: what": called, imported by name
    or referenced as an attribute (identity.of_call passed as a callback counts too)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            found += [f"{relative}:{node.lineno}: imports {a.name}" for a in node.names if a.name in CONTEXT_CALLS]
        elif isinstance(node, ast.Attribute) and node.attr in CONTEXT_CALLS:
            found.append(f"{relative}:{node.lineno}: uses .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in CONTEXT_CALLS:
            found.append(f"{relative}:{node.lineno}: uses {node.id}")
    return found


def test_only_servicers_read_the_caller_from_the_call_context():
    found = []
    scanned = 0
    for path in sorted(SERVICES.rglob("*.py")):
        relative = path.relative_to(SERVICES).as_posix()
        if not reads_the_caller(relative):
            scanned += 1
            found += violations(relative, path.read_text())
    assert scanned > 100  # the tree was read
    assert not found, "\n".join(found)


def test_the_servicers_that_read_it_are_the_ones_expected():
    readers = {p.relative_to(SERVICES).as_posix() for p in SERVICES.rglob("*.py")
               if violations(p.relative_to(SERVICES).as_posix(), p.read_text())}
    assert {"scheduler/servicer.py", "scheduler/experiment_servicer.py", "scheduler/package_servicer.py",
            "trainer/servicer.py", "exporter/servicer.py", "common/interceptors.py"} <= readers
    assert all(reads_the_caller(r) for r in readers)


@pytest.mark.parametrize(("relative", "source", "says"), [
    ("scheduler/job_inputs.py", "from paddleray.services.common import identity\ncaller = identity.of_call()\n",
     "uses .of_call"),
    ("scheduler/experiments.py", "from paddleray.services.common import identity\n"
     "with identity.acting_as(identity.LOCAL):\n    pass\n", "uses .acting_as"),
    ("scheduler/jobs.py", "from paddleray.services.common.identity import of_call\n", "imports of_call"),
    ("trainer/runs.py", "from paddleray.services.common.identity import set_current as s\n", "imports set_current"),
    ("exporter/registry/models.py", "def f(get=identity.of_call):\n    return get()\n", "uses .of_call"),
])
def test_a_planted_read_of_the_caller_is_found(relative, source, says):
    assert not reads_the_caller(relative)
    found = violations(relative, source)
    assert found and says in found[0] and found[0].startswith(f"{relative}:")


def test_what_the_rule_allows_passes():
    # Passing the caller, and the rules that take it, are not reads of the context.
    assert violations("scheduler/experiments.py", "from paddleray.services.common import identity\n"
                      "await jobs.create_trial(job, name, {}, caller=identity.LOCAL)\n"
                      "identity.require_write(caller, 'CreateJob')\n") == []
    assert reads_the_caller("scheduler/experiment_servicer.py") and reads_the_caller("exporter/servicer.py")
    assert reads_the_caller("common/interceptors.py") and not reads_the_caller("common/servicers.py")
