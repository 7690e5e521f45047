"""Page tokens of the list RPCs: the last index member of a page, opaque to clients.

Jobs and experiments are both listed newest first from a sorted set whose members are
"{create time, 15 digits}:{id}"; the next page starts strictly after the token's member, so
pages stay stable while new entries are created.
"""

from __future__ import annotations

import base64
import re

from paddleray.services.common.errors import InvalidArgument

_MEMBER = re.compile(r"\d{15}:[a-z][a-z0-9-]{0,62}")


def encode_token(member: str) -> str:
    return base64.urlsafe_b64encode(member.encode()).decode().rstrip("=")


def decode_token(token: str, rpc: str) -> str:
    """The member a token stands for; INVALID_ARGUMENT naming `rpc` for anything else."""
    try:
        member = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        member = ""
    if not _MEMBER.fullmatch(member):
        raise InvalidArgument("page_token", f"not a token returned by {rpc}")
    return member
