"""Sending fuzzed requests over a real channel, and recording what came back.

Every request goes through a generic method with identity serializers (bytes in, bytes out),
so generated messages and raw garbage take the same path, and the server alone decodes them.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from google.protobuf import descriptor as d
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import settings

from support.proto_contract import documented_codes

FORBIDDEN = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
MUTATING = ("Create", "Update", "Delete", "Cancel", "Start", "Stop", "Export", "Upload")
UNARY_TIMEOUT_S = 15.0
# A watch on a resource that exists stays open: its first message (or this deadline) ends the call.
STREAM_TIMEOUT_S = 1.5
# One setting for every result the report reads (tests/support/results.py uses it too).
RESULTS = Path(os.environ.get("PADDLERAY_RELIABILITY_RESULTS_DIR", Path(__file__).parent / "results")) / "fuzz.json"


@dataclass
class Recorder:
    """Counts of fuzzed requests by service, method, input kind and status code; the failures."""

    profile: str
    counts: collections.Counter = field(default_factory=collections.Counter)
    failures: list[dict] = field(default_factory=list)
    started: float = field(default_factory=time.time)

    def record(self, service: str, method: str, kind: str, code: grpc.StatusCode) -> None:
        self.counts[(service, method, kind, code.name)] += 1

    def fail(self, service: str, method: str, kind: str, problem: str, request: object) -> None:
        shown = repr(request)
        self.failures.append({"service": service, "method": method, "kind": kind, "problem": problem,
                              "request": shown if len(shown) < 600 else shown[:600] + f"... ({len(shown)} chars)"})

    def write(self, path: Path = RESULTS) -> None:
        rows = [{"service": s, "method": m, "kind": k, "code": c, "count": n}
                for (s, m, k, c), n in sorted(self.counts.items())]
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=Path(__file__).parent).stdout.strip()
        except OSError:
            commit = ""
        path.parent.mkdir(parents=True, exist_ok=True)
        # Failures seen while hypothesis shrinks repeat one finding: the distinct ones are kept.
        unique = list({(f["service"], f["method"], f["problem"][:120]): f for f in self.failures}.values())
        path.write_text(json.dumps({
            "profile": self.profile, "commit": commit, "started": self.started,
            "duration_s": round(time.time() - self.started, 1), "requests": rows,
            "failures": unique, "failure_count": len(self.failures),
        }, indent=1) + "\n")


def method_path(method: d.MethodDescriptor) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


def invoke(channel: grpc.Channel, method: d.MethodDescriptor, payloads: bytes | list[bytes]) -> grpc.StatusCode:
    """Sends `payloads` (a list for a client stream) and returns the call's status code; a
    server stream counts as OK once its first message has come."""
    path = method_path(method)
    try:
        if method.client_streaming:
            chunks = payloads if isinstance(payloads, list) else [payloads]
            channel.stream_unary(path)(iter(chunks), timeout=UNARY_TIMEOUT_S)
        elif method.server_streaming:
            call = channel.unary_stream(path)(_one(payloads), timeout=STREAM_TIMEOUT_S)
            for _ in call:
                call.cancel()
                break
        else:
            channel.unary_unary(path)(_one(payloads), timeout=UNARY_TIMEOUT_S)
    except grpc.RpcError as error:
        code = error.code()
        # Our own cancel after the first streamed message.
        return grpc.StatusCode.OK if code == grpc.StatusCode.CANCELLED else code
    return grpc.StatusCode.OK


def _one(payloads: bytes | list[bytes]) -> bytes:
    return payloads[0] if isinstance(payloads, list) else payloads


def healthy(channel: grpc.Channel) -> bool:
    response = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    return response.status == health_pb2.HealthCheckResponse.SERVING


@dataclass
class Target:
    """One service under fuzz: its channel, the resource names that exist, and a fingerprint
    of its durable state that a rejected call must leave as it was."""

    service: str
    channel: grpc.Channel
    names: tuple[str, ...]
    fingerprint: Callable[[], object]
    recorder: Recorder
    # Soak runs record a failed check and go on (hypothesis would stop the RPC's test at the
    # first one): the fixture fails the module at its end instead.
    keep_going: bool = False
    # Valid requests by RPC name, which mutations start from; fields a mutation leaves alone.
    bases: dict[str, object] = field(default_factory=dict)
    frozen: dict[str, frozenset[str]] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"Target({self.service})"

    def _repr_pretty_(self, printer, cycle) -> None:  # hypothesis prints failing examples with this
        printer.text(repr(self))

    def send(self, method: d.MethodDescriptor, kind: str, payloads: bytes | list[bytes], shown: object) -> None:
        """One fuzzed call, checked: no INTERNAL/UNKNOWN, no code its proto comment does not list;
        a rejected mutation changes nothing."""
        mutating = method.name.startswith(MUTATING)
        before = self.fingerprint() if mutating else None
        code = invoke(self.channel, method, payloads)
        self.recorder.record(self.service, method.name, kind, code)
        problem = ""
        if code in FORBIDDEN:
            problem = f"answered {code.name}"
        elif code.name not in documented_codes(method.containing_service.full_name, method.name):
            problem = f"answered {code.name}, which its contract in protos/ does not list"
        elif mutating and code != grpc.StatusCode.OK and (after := self.fingerprint()) != before:
            problem = f"rejected with {code.name} but changed state: {_diff(before, after)}"
        if problem:
            self.recorder.fail(self.service, method.name, kind, problem, shown)
            if not self.keep_going:
                raise AssertionError(f"{self.service}.{method.name} ({kind}): {problem}")


    def failures(self) -> list[dict]:
        return [f for f in self.recorder.failures if f["service"] == self.service]


def _diff(before: object, after: object) -> str:
    if isinstance(before, dict) and isinstance(after, dict):
        return "; ".join(f"{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in before | after
                         if before.get(k) != after.get(k))[:400]
    return f"{before!r} -> {after!r}"[:400]


def all_pages(list_call: Callable[[str], tuple[Iterable[str], str]]) -> list[str]:
    """Every name over the pages of a List RPC: list_call(page_token) -> (names, next_token)."""
    found, token = [], ""
    while True:
        names, token = list_call(token)
        found.extend(names)
        if not token:
            return sorted(found)


def soak() -> bool:
    """The soak profile (PADDLERAY_SOAK=1, or --hypothesis-profile soak): the report's sizes."""
    return settings.get_current_profile_name() == "soak"


class LoopThread:
    """An event loop running in a thread, for a server that is not a paddleray app."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
