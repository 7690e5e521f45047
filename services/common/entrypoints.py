"""Which user functions a run may call: the rule the scheduler (at CreateJob) and the trainer
(at StartRun, and again in the worker at import) both apply.

A run calls `module:function(config, ctx)` with a client-chosen config, so an open entrypoint
would let any caller run any installed function with arguments of their choosing
(`os:system`, `subprocess:run`, ...). Two kinds of module may run:

- modules under an allowlisted prefix (operator-installed training code), for anyone the
  service lets in;
- a module inside the job's own uploaded package (spec.runtime_env.working_dir naming a
  package). Shipping code is running code: whoever may call CreateJob (an authenticated caller
  once the services' auth token is set) may run their own code on the workers, as with Ray Jobs.
  What the rule keeps out is the rest of the machine: the module's file must be in the zip
  (checked from the stored zip's file list), and the worker checks that the module it imported
  was loaded from the package's directory, so a zip cannot borrow an installed module by
  naming it (a `os.py` in the zip does not make `os:system` callable: `os` is already imported).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from paddleray.services.common import errors
from paddleray.services.common.packages import module_file_in

DEFAULT_ALLOWLIST = ("paddleray.services.trainer.examples",)
# Python identifiers, ASCII only (the scheduler and the trainer accept the same entrypoints).
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_ENTRYPOINT = re.compile(rf"{_IDENT}(\.{_IDENT})*:{_IDENT}")


def check_form(entrypoint: str, field: str = "spec.entrypoint") -> None:
    if not _ENTRYPOINT.fullmatch(entrypoint):
        raise errors.InvalidArgument(field, "must have the form 'package.module:function'")


def allowlisted(module: str, allowlist: Sequence[str]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in allowlist)


def check_entrypoint(
    entrypoint: str,
    allowlist: Sequence[str],
    package_files: Collection[str] | None = None,
    field: str = "spec.entrypoint",
) -> bool:
    """Raises unless the entrypoint may run; returns True when it may only as package code
    (the worker must then find the imported module inside the package's directory)."""
    check_form(entrypoint, field)
    module = entrypoint.partition(":")[0]
    if allowlisted(module, allowlist):
        return False
    if package_files is not None:
        if module_file_in(module, package_files):
            return True
        raise errors.PermissionDenied(
            f"{field}: module {module!r} is neither under an allowed prefix ({', '.join(allowlist) or 'none'}) "
            f"nor a file of the job's package ({module.replace('.', '/')}.py or .../__init__.py)"
        )
    raise errors.PermissionDenied(
        f"{field}: module {module!r} is not under an allowed prefix ({', '.join(allowlist) or 'none'}); "
        "upload your code as a package (runtime_env.working_dir) to run a module of your own"
    )
