"""Credentials for the auth matrices: one token file, the callers that use it, and a call's code."""

from __future__ import annotations

from pathlib import Path

import grpc
import yaml

READER_A = "reader-of-team-a-0000000001"
MEMBER_A = "member-of-team-a-0000000001"
MEMBER_B = "member-of-team-b-0000000001"
ADMIN = "admin-of-the-platform-000001"

# Caller name -> bearer token (None: no authorization metadata at all).
CALLERS: dict[str, str | None] = {
    "no-token": None,
    "bad-token": "not-a-token-anyone-holds-01",
    "read-only-a": READER_A,
    "member-a": MEMBER_A,
    "member-b": MEMBER_B,
    "admin": ADMIN,
}
UNAUTHENTICATED = {"no-token": grpc.StatusCode.UNAUTHENTICATED, "bad-token": grpc.StatusCode.UNAUTHENTICATED}


def write_token_file(path: Path, extra: dict | None = None) -> Path:
    path.write_text(yaml.safe_dump({
        READER_A: {"tenant": "team-a", "role": "read-only"},
        MEMBER_A: {"tenant": "team-a", "role": "member"},
        MEMBER_B: {"tenant": "team-b", "role": "member"},
        ADMIN: {"tenant": "ops", "role": "admin"},
        **(extra or {}),
    }))
    return path


def metadata(token: str | None) -> tuple:
    return (("authorization", f"Bearer {token}"),) if token else ()


async def code_of(call) -> grpc.StatusCode:
    """The status of an aio call (unary or streaming), OK when it succeeds."""
    try:
        result = call()
        if hasattr(result, "__aiter__"):
            async for _ in result:
                pass
        else:
            await result
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def expect(**codes: grpc.StatusCode) -> dict[str, grpc.StatusCode]:
    """Expected code per caller: UNAUTHENTICATED without a valid token, then the given ones
    (keyword names use _ for -: read_only_a, member_a, member_b, admin)."""
    return {**UNAUTHENTICATED, **{k.replace("_", "-"): v for k, v in codes.items()}}


def check_matrix(service: str, matrix: str, expected: dict[str, dict[str, grpc.StatusCode]],
                 got: dict[str, dict[str, grpc.StatusCode]]) -> list[str]:
    """Records the matrix's cells for the reliability report, then returns those that differ
    from what was expected (rpc -> caller -> code in both)."""
    from support.results import record_auth_matrix

    record_auth_matrix(service, matrix, expected, got)
    return [f"{rpc} as {caller}: expected {want.name}, got {got[rpc][caller].name}"
            for rpc, row in expected.items() for caller, want in row.items() if got[rpc][caller] != want]
