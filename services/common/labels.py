"""Labels on jobs, experiments, models and model versions: one rule for every service.

Kubernetes' label syntax (a key of an optional DNS-subdomain prefix and a name, values of the
name's form), so labels can be copied onto the Kubernetes objects a platform team runs beside
these, and filters mean the same everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from paddleray.services.common.errors import InvalidArgument

MAX_LABELS = 64
_LABEL_NAME = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def validate_labels(labels: Mapping[str, str], field: str) -> None:
    """INVALID_ARGUMENT naming the label (`field[key]`) and the rule it breaks."""
    if len(labels) > MAX_LABELS:
        raise InvalidArgument(field, f"at most {MAX_LABELS} labels")
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
            raise InvalidArgument(f"{field}[{key!r}]", "key prefix must be a DNS subdomain of at most 253 characters")
        if not _LABEL_NAME.fullmatch(name):
            raise InvalidArgument(
                f"{field}[{key!r}]", "key name must be 1-63 characters of [A-Za-z0-9._-], starting and ending alphanumeric"
            )
        if value and not _LABEL_NAME.fullmatch(value):
            raise InvalidArgument(
                f"{field}[{key!r}]", "value must be at most 63 characters of [A-Za-z0-9._-], starting and ending alphanumeric"
            )
