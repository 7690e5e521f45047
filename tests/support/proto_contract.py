"""The errors each RPC's contract states: the status codes named in its comment in protos/,
plus those its service's comment names for every RPC ("Errors of every RPC: ...").

Generated descriptors carry no comments, so the .proto files are read. The fuzz tests check
every code a service answers against these (tests/reliability/harness.py); a unit test checks
that every RPC states its errors at all (tests/unit/test_proto_contract.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import grpc

PROTOS = Path(__file__).resolve().parents[2] / "protos"
CODES = frozenset(code.name for code in grpc.StatusCode)
# Answers a client gives itself (its deadline, its cancel) and success: never a contract's to list.
CLIENT_SIDE = frozenset({"OK", "CANCELLED", "DEADLINE_EXCEEDED"})
_CODE = re.compile(r"\b(" + "|".join(sorted(CODES, key=len, reverse=True)) + r")\b")
_SERVICE = re.compile(r"^service (\w+) \{")
_RPC = re.compile(r"^\s*rpc (\w+)\(")


@dataclass
class ServiceContract:
    comment: str = ""
    rpcs: dict[str, str] = field(default_factory=dict)  # RPC name -> its comment

    def codes(self, rpc: str) -> frozenset[str]:
        """The codes the RPC may answer by its contract (its own and its service's)."""
        return frozenset(_CODE.findall(self.comment)) | frozenset(_CODE.findall(self.rpcs[rpc]))


def parse(text: str) -> dict[str, ServiceContract]:
    """Service name -> its contract, from one .proto file's text."""
    services: dict[str, ServiceContract] = {}
    comment: list[str] = []
    current: ServiceContract | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("//"):
            comment.append(stripped[2:].strip())
            continue
        if (service := _SERVICE.match(line)) is not None:
            current = services[service.group(1)] = ServiceContract(" ".join(comment))
        elif current is not None and (rpc := _RPC.match(line)) is not None:
            current.rpcs[rpc.group(1)] = " ".join(comment)
        elif stripped == "}":
            current = None if not line.startswith(" ") else current
        comment = []
    return services


@cache
def contracts() -> dict[str, ServiceContract]:
    """Fully qualified service name (paddleray.scheduler.v1.JobService) -> its contract."""
    found = {}
    for path in sorted((PROTOS / "paddleray").rglob("*_service.proto")):
        if "inference" in path.parts:  # the Open Inference Protocol's contract is upstream's
            continue
        text = path.read_text()
        package = re.search(r"^package ([\w.]+);", text, re.M)
        assert package is not None, path
        found.update({f"{package.group(1)}.{name}": contract for name, contract in parse(text).items()})
    return found


def documented_codes(service: str, rpc: str) -> frozenset[str]:
    """What the RPC may answer: the codes its contract names, and those a client gives itself."""
    return contracts()[service].codes(rpc) | CLIENT_SIDE
