"""Tenant rules live in one layer, the domain's; servicers only read the caller and pass it.

Issue 22.5: the exporter applied the rules in its domain, the scheduler's servicers called
scheduler/tenancy.py around JobManager calls and the trainer's servicer called common.identity
itself. Now every domain operation takes the caller as an argument and applies the rules, so a
servicer (services/**/servicer.py, *_servicer.py) uses no common.identity function but
`of_call`, and imports no service's own tenant-rule module. Checked over the source with ast.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SERVICES = Path(__file__).resolve().parents[2] / "services"
IDENTITY = "paddleray.services.common.identity"
# The services' own tenant-rule modules, which their domains call.
RULE_MODULES = frozenset({"paddleray.services.scheduler.tenancy", "paddleray.services.trainer.references"})


def identity_functions() -> frozenset[str]:
    """Every function common/identity.py defines: the rules and the context calls."""
    tree = ast.parse((SERVICES / "common" / "identity.py").read_text())
    return frozenset(n.name for n in tree.body if isinstance(n, ast.FunctionDef))


FORBIDDEN = identity_functions() - {"of_call"}


def is_servicer(relative: str) -> bool:
    name = relative.rsplit("/", 1)[-1]
    return name == "servicer.py" or name.endswith("_servicer.py")


def _absolute(node: ast.ImportFrom, relative: str) -> str:
    """The module an ImportFrom names, relative imports resolved against services/<relative>."""
    if not node.level:
        return node.module or ""
    package = ["paddleray", "services", *relative.split("/")[:-1]]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def violations(relative: str, source: str) -> list[str]:
    """Each use in the module of a tenant rule, as "path:line: what"."""
    found: list[str] = []
    aliases: set[str] = set()  # names bound to the identity module itself
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == IDENTITY and alias.asname:
                    aliases.add(alias.asname)
                if alias.name in RULE_MODULES:
                    found.append(f"{relative}:{node.lineno}: imports {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, relative)
            for alias in node.names:
                full = f"{module}.{alias.name}"
                if module == IDENTITY and alias.name in FORBIDDEN:
                    found.append(f"{relative}:{node.lineno}: imports identity.{alias.name}")
                elif full == IDENTITY:
                    aliases.add(alias.asname or alias.name)
                elif module in RULE_MODULES or full in RULE_MODULES:
                    found.append(f"{relative}:{node.lineno}: imports {module if module in RULE_MODULES else full}")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in FORBIDDEN
                and isinstance(node.value, ast.Name) and node.value.id in aliases):
            found.append(f"{relative}:{node.lineno}: uses identity.{node.attr}")
        elif (isinstance(node, ast.Attribute) and node.attr in FORBIDDEN
              and ast.unparse(node.value) == IDENTITY):
            found.append(f"{relative}:{node.lineno}: uses identity.{node.attr}")
    return sorted(found)


def servicers() -> dict[str, str]:
    return {p.relative_to(SERVICES).as_posix(): p.read_text() for p in sorted(SERVICES.rglob("*.py"))
            if is_servicer(p.relative_to(SERVICES).as_posix())}


def test_no_servicer_applies_a_tenant_rule_itself():
    found = servicers()
    assert {"scheduler/servicer.py", "scheduler/experiment_servicer.py", "scheduler/package_servicer.py",
            "trainer/servicer.py", "exporter/servicer.py"} <= set(found)
    problems = [v for relative, source in found.items() for v in violations(relative, source)]
    assert not problems, "\n".join(problems)


def test_the_rules_it_looks_for_are_identity_s():
    assert {"require_write", "tenant_for_write", "visible", "check_visible", "list_filter"} <= FORBIDDEN
    assert "of_call" not in FORBIDDEN


@pytest.mark.parametrize(("relative", "source", "says"), [
    ("trainer/servicer.py", "from paddleray.services.common import identity\n"
     "identity.require_write(caller, 'StartRun')\n", "uses identity.require_write"),
    ("scheduler/servicer.py", "from paddleray.services.common import identity as ident\n"
     "tenant = ident.list_filter(caller, request.tenant)\n", "uses identity.list_filter"),
    ("exporter/servicer.py", "from paddleray.services.common.identity import check_visible, of_call\n",
     "imports identity.check_visible"),
    ("scheduler/experiment_servicer.py", "import paddleray.services.common.identity\n"
     "paddleray.services.common.identity.tenant_for_write(c, t, 'tenant')\n", "uses identity.tenant_for_write"),
    ("scheduler/package_servicer.py", "import paddleray.services.common.identity as i\nok = i.visible\n",
     "uses identity.visible"),
    ("scheduler/servicer.py", "from paddleray.services.scheduler import tenancy\n",
     "imports paddleray.services.scheduler.tenancy"),
    ("scheduler/servicer.py", "from paddleray.services.scheduler.tenancy import shown\n",
     "imports paddleray.services.scheduler.tenancy"),
    ("scheduler/experiment_servicer.py", "from . import tenancy\n", "imports paddleray.services.scheduler.tenancy"),
    ("trainer/servicer.py", "from paddleray.services.trainer import convert, references\n",
     "imports paddleray.services.trainer.references"),
])
def test_a_planted_rule_in_a_servicer_is_found(relative, source, says):
    found = violations(relative, source)
    assert found and says in found[0] and found[0].startswith(f"{relative}:"), found


def test_reading_and_passing_the_caller_is_allowed():
    assert violations("scheduler/servicer.py", "from paddleray.services.common.identity import of_call\n"
                      "from paddleray.services.common import identity\n"
                      "await self.manager.get(request.name, caller=of_call())\n"
                      "await self.manager.get(request.name, caller=identity.of_call())\n") == []
    assert is_servicer("exporter/serving/replica/v2_servicer.py") and not is_servicer("scheduler/tenancy.py")
