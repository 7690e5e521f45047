"""docs/configuration.md, rendered from the services' settings classes: every variable, its
flag, format and default, so the page cannot drift from the code (a unit test compares them).

Regenerate: `.venv/bin/python -m paddleray.services.common.settings_reference > docs/configuration.md`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from paddleray.services.common.settings import ServiceSettings, value_format

HEADER = """# Configuration: every service setting

Each service reads its settings from environment variables with its own prefix
(`PADDLERAY_SCHEDULER_`, `PADDLERAY_TRAINER_`, `PADDLERAY_EXPORTER_`), overridden by the flag of
the same name (`paddleray-trainer --entrypoint-allowlist a,b`). Formats:

- a **list** (the allowlists): a comma-separated list (`pkg.a,pkg.b`) or a JSON array
  (`["pkg.a", "pkg.b"]`); empty means none;
- a **JSON object**: `{"team-a": {"max_jobs": 4}}`;
- **true or false**, an **integer**, a **number** (seconds where the name ends in `_s`), a **file path**.

A bad value stops the service at start-up with one line naming the variable and its format
(`paddleray up` shows that line), for example:

    paddleray-trainer: PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST (--entrypoint-allowlist): not a valid JSON array (Expecting value at column 2); expected a comma-separated list (a,b) or a JSON array (["a", "b"])

The client side (CLI and SDK: `PADDLERAY_ADDRESS`, `PADDLERAY_TOKEN`, contexts) is in
[cli.md](cli.md). This page is generated from the code
(`python -m paddleray.services.common.settings_reference`); do not edit it by hand.
"""

# Computed per process or host: the default shown is the rule, not a value.
_DYNAMIC_DEFAULTS = {"replica_id": "host-pid-random", "storage_root": "~/.paddleray/storage"}


def _services() -> list[tuple[str, type[ServiceSettings]]]:
    from paddleray.services.exporter.settings import ExporterSettings
    from paddleray.services.scheduler.settings import SchedulerSettings
    from paddleray.services.trainer.settings import TrainerSettings

    return [("scheduler", SchedulerSettings), ("trainer", TrainerSettings), ("exporter", ExporterSettings)]


def _default(name: str, field: Any) -> str:
    if name in _DYNAMIC_DEFAULTS:
        return _DYNAMIC_DEFAULTS[name]
    value = field.default_factory() if field.default is PydanticUndefined and field.default_factory else field.default
    if hasattr(value, "get_secret_value"):
        value = value.get_secret_value()
    if value is None or value == "":
        return "unset"
    if isinstance(value, list):
        return ",".join(value) or "none"
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, Path):
        return str(value)
    return json.dumps(value) if isinstance(value, bool) else str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    parts = [HEADER]
    for service, settings in _services():
        prefix = settings.model_config.get("env_prefix", "")
        parts.append(f"\n## {service} (`paddleray-{service}`)\n\n| variable | format | default | what |\n|---|---|---|---|\n")
        for name, field in settings.model_fields.items():
            model: Any = field.annotation
            if _split_once(model, name):  # a peer's settings: one variable each
                parts += [_row(f"{prefix}{name}_{sub}", sub, info) for sub, info in model.model_fields.items()]
            else:
                parts.append(_row(f"{prefix}{name}", name, field))
    return "".join(parts)


def _split_once(annotation: Any, name: str) -> bool:
    """Whether the environment names this model's fields one by one: ServiceSettings splits a
    name once, after a field whose own name has no underscore (services/common/peers.py)."""
    return isinstance(annotation, type) and issubclass(annotation, BaseModel) and "_" not in name


def _row(variable: str, name: str, field: Any) -> str:
    kind = value_format(field.annotation) or "text"
    kind = "list" if kind.startswith("a comma-separated") else kind.removeprefix("a ").removeprefix("an ")
    return f"| `{variable.upper()}` | {kind} | `{_cell(_default(name, field))}` | {_cell(field.description or '')} |\n"


if __name__ == "__main__":
    print(render(), end="")
