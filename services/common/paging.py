"""List paging (AIP-158): one page-size rule and one opaque page-token codec for every service.

A page size above the maximum is coerced to it, not rejected; a page also ends early when its
items reach MAX_PAGE_BYTES. A token names the position
after which the next page starts (an index member, a sort key: whatever the store pages by)
and is bound to the request's filters: a token reused with other filters is rejected, since
its position means nothing under them.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping

from paddleray.services.common.errors import InvalidArgument

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
# Pages are bounded by bytes too: a page of large resources (1 MiB configs) ends early, with a
# next_page_token, so that it fits the 4 MiB a stock gRPC client accepts by default.
MAX_PAGE_BYTES = 4 << 20


class ByteBudget:
    """How much of a page's bytes are spent. The first item always fits (a page holds at least
    one item, so listing always moves on), any other only while the page stays within budget."""

    def __init__(self, limit: int = MAX_PAGE_BYTES) -> None:
        self.limit = limit
        self.used = 0
        self.items = 0

    def take(self, size: int) -> bool:
        """Counts an item of `size` bytes in when it fits; False (nothing counted) otherwise."""
        if self.items and self.used + size > self.limit:
            return False
        self.used += size
        self.items += 1
        return True


def page_size(requested: int, field: str = "page_size", default: int = DEFAULT_PAGE_SIZE,
              maximum: int = MAX_PAGE_SIZE) -> int:
    """The page size to use: default for 0, at most maximum; INVALID_ARGUMENT when negative."""
    if requested < 0:
        raise InvalidArgument(field, "must not be negative (0 means the default)")
    if requested == 0:
        return default
    return min(requested, maximum)


def _filters_digest(filters: object) -> str:
    canonical = json.dumps(_canonical(filters), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _canonical(value: object) -> object:
    # Repeated filter fields are sets to the caller: [A, B] and [B, A] are the same query.
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return sorted((_canonical(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True, default=str))
    return value


def encode_page_token(position: str, filters: object = None) -> str:
    """An opaque token for the page after position, valid only with the same filters."""
    payload = json.dumps({"p": position, "f": _filters_digest(filters)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def decode_page_token(token: str, filters: object = None, rpc: str = "this list call") -> str | None:
    """The position a token stands for, None for the first page (empty token).

    INVALID_ARGUMENT naming page_token for anything not issued by encode_page_token, or
    issued for other filters.
    """
    if not token:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        position, digest = payload["p"], payload["f"]
    except (ValueError, TypeError, KeyError, UnicodeDecodeError):
        raise InvalidArgument("page_token", f"not a token returned by {rpc}") from None
    if not isinstance(position, str) or not isinstance(digest, str):
        raise InvalidArgument("page_token", f"not a token returned by {rpc}")
    if digest != _filters_digest(filters):
        raise InvalidArgument("page_token", "was issued for a request with other filters; start again without a token")
    return position
