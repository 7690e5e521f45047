"""Shared by the deploy/ tests: the repo's pins and manifest loading."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from paddleray.services.common.peers import PeerSettings

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def pin(requirement_prefix: str, requirements: list[str]) -> str:
    """The ==version of the requirement that starts with requirement_prefix."""
    for requirement in requirements:
        if requirement.startswith(requirement_prefix):
            match = re.search(r"==\s*([\w.]+)", requirement)
            assert match, f"{requirement} is not pinned with =="
            return match.group(1)
    raise AssertionError(f"no requirement starting with {requirement_prefix}")


def load_all(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def walk_strings(node) -> list[str]:
    """Every string value in a parsed YAML document, at any depth."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for value in node.values() for s in walk_strings(value)]
    if isinstance(node, list):
        return [s for item in node for s in walk_strings(item)]
    return []



def settings_from_env(settings_class, prefix: str, env: dict[str, str | None], monkeypatch):
    """Builds the settings a container's environment gives, after checking that every
    PADDLERAY_ variable is a field of them (values None: filled in by the platform)."""
    for name, value in env.items():
        if not name.startswith("PADDLERAY_"):
            continue
        assert name.startswith(prefix), name
        assert _is_setting(settings_class, name[len(prefix):].lower()), name
        # Secrets and pod fields are filled in by the platform; a stand-in shows the type fits.
        monkeypatch.setenv(name, "from-the-platform" if value is None else value)
    return settings_class()


def _is_setting(settings_class, name: str) -> bool:
    """A field, or a field of a peer (`trainer_tls_ca_file` is trainer.tls_ca_file)."""
    if name in settings_class.model_fields:
        return True
    for field, info in settings_class.model_fields.items():
        peer = info.annotation
        if isinstance(peer, type) and issubclass(peer, PeerSettings) and name.startswith(f"{field}_"):
            return name[len(field) + 1:] in peer.model_fields
    return False
