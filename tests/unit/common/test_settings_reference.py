"""docs/configuration.md is the settings classes rendered: a setting added, renamed or
re-described without regenerating the page fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from paddleray.services.common.settings_reference import render

pytestmark = pytest.mark.unit
PAGE = Path(__file__).parents[3] / "docs" / "configuration.md"


def test_the_configuration_page_is_current():
    assert PAGE.read_text() == render(), (
        "docs/configuration.md is stale: .venv/bin/python -m paddleray.services.common.settings_reference "
        "> docs/configuration.md")


def test_every_list_setting_is_documented_as_a_list():
    lines = [line for line in render().splitlines() if "ALLOWLIST`" in line]
    assert len(lines) == 3 and all("| list |" in line for line in lines)
