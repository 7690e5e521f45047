"""The measured sections of docs/reliability.md: the load test, the fault-injection tests'
figures and the auth matrices, each from the JSON its tests wrote (tests/support/results.py).

A section whose results are absent says "not run": nothing here makes a figure up.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

# What an auth matrix expects when a caller must not get through: no valid credential, a
# role that may not do it, or another tenant's resource (answered as if absent).
REJECTED = ("UNAUTHENTICATED", "PERMISSION_DENIED", "NOT_FOUND")
SHORT = {"UNAUTHENTICATED": "UNAUTH", "PERMISSION_DENIED": "DENIED", "FAILED_PRECONDITION": "PRECONDITION",
         "ALREADY_EXISTS": "EXISTS"}
CALLERS = ("no-token", "bad-token", "read-only-a", "member-a", "member-b", "admin")
SERVICES = ("scheduler", "trainer", "exporter")


def table(header: list[str], rows: list[list[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def when(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def load_results(results_dir: Path) -> tuple[dict | None, dict[str, dict], dict[str, dict]]:
    """(load.json, fault figures by test function name, auth matrices by service); absent ones left out."""
    load = results_dir / "load.json"
    faults = {p.stem: json.loads(p.read_text()) for p in sorted((results_dir / "faults").glob("*.json"))}
    auth = {p.stem: json.loads(p.read_text()) for p in sorted((results_dir / "auth").glob("*.json"))}
    return (json.loads(load.read_text()) if load.exists() else None), faults, auth


# --- load


def render_load(load: dict | None) -> list[str]:
    out = ["## Load: jobs created, paginated, cancelled", ""]
    if load is None:
        return out + ["Not run (`pytest tests/reliability/test_load.py` writes its figures).", ""]
    n = load["jobs"]
    size = (" CI runs 2,000; soak mode (`PADDLERAY_SOAK=1`) or `PADDLERAY_LOAD_JOBS` this size." if n >= 10_000
            else " This is the CI size: the issue asks for 10,000, which soak mode (`PADDLERAY_SOAK=1`) runs.")
    create, cancel, paging = load["create"], load["cancel"], load["pagination"]
    out += [
        f"Run: sized by `{load['profile']}`, commit `{load['commit']}`, {when(load['recorded'])}: {n:,} jobs.{size}",
        "",
        "`tests/reliability/test_load.py`: one scheduler in-process behind a real gRPC server, on a real "
        "redis-server, the scripted trainer behind it with 1 CPU that one hanging job holds; every job asks "
        "for 1 CPU, so each is a dispatch candidate that stays QUEUED while the dispatcher runs. One client "
        f"channel, {load['in_flight']} calls in flight; client, server and trainer share one Python process. Figures "
        "from one shared 2-core machine, not a benchmark (`bench/` measures growth).",
        "",
    ]
    out += table(["step", "calls", "per second", "p50 ms", "p99 ms", "seconds"], [
        ["CreateJob", f"{n:,}", f"{create['per_s']:,}", create["p50_ms"], create["p99_ms"], create["seconds"]],
        [f"ListJobs, every page ({paging['page_size']} per page, BASIC view)", f"{paging['pages']} pages", "", "", "",
         paging["seconds"]],
        ["CancelJob", f"{n:,}", f"{cancel['per_s']:,}", cancel["p50_ms"], cancel["p99_ms"], cancel["seconds"]],
    ])
    out += [
        "",
        f"Redis memory per queued job: {load['redis_bytes_per_queued_job']:,} bytes (`used_memory` after the "
        "creates minus before, over the jobs).",
        "",
        f"Checked (the test fails otherwise): the pages list exactly the {n:,} job names created, none missing, "
        f"none twice, no page over {paging['page_size']}; all of them QUEUED; after CancelJob on each, all "
        f"{n:,} are CANCELLED (listed with a state filter) and none is QUEUED; health is SERVING after.",
        "",
    ]
    return out


# --- fault figures


def _figure(key: str, value: object) -> str:
    if key.endswith("_s"):
        return f"{key[:-2].replace('_', ' ')}: {value} s"
    return f"{key.replace('_', ' ')}: {value}"


def render_faults(tests, figures: dict[str, dict], recording: set[str]) -> list[str]:
    """`tests`: the report's FaultTest list; `figures`: recorded figures by test function name."""
    recorded = [figures[t.name] for t in tests if t.name in figures]
    # Repeated epochs and versions stuck EXPORTING are duplicates and losses too.
    kinds = {"faults_injected": ("faults_injected",), "_lost": ("_lost", "_stuck_exporting"),
             "_duplicated": ("_duplicated", "_repeated")}
    total = {kind: sum(v for r in recorded for k, v in r["figures"].items() if k.endswith(ends))
             for kind, ends in kinds.items()}
    out = [
        "## Fault injection elsewhere in the suite",
        "",
        "These tests inject a fault into a real process (SIGKILL, a stopped Redis or Ray head, a killed "
        "actor) and assert on what survives. They run in the integration and end-to-end suites, not here; "
        "this list is checked against the test files each time the report is written. A test writes its "
        "figures only when it passes (`fault_figures` in tests/conftest.py); one that records figures but has "
        "none shows \"not run\" (not run where the report was written, or not passing there); one that "
        "records none yet shows \"asserts only\" (it runs in CI and checks what it proves; no figures kept). "
        "The lost and duplicated counts are taken after the test's assertions passed: a test that lost or "
        "duplicated anything fails and records nothing, so each 0 here stands for a passing run.",
        "",
        f"Recorded: {len(recorded)} of {len(tests)} tests; {total['faults_injected']} faults injected, "
        f"{total['_lost']} jobs, trials or epochs lost, {total['_duplicated']} duplicated.",
        "",
    ]
    rows = []
    for t in tests:
        got = figures.get(t.name)
        measured = ("asserts only" if t.name not in recording else "not run" if got is None else
                    "; ".join(_figure(k, v) for k, v in got["figures"].items()) + f" (`{got['commit']}`)")
        rows.append([f"`{t.path}::{t.name}`", t.fault, t.proves, measured])
    return out + table(["test", "fault injected", "what it proves", "measured"], rows) + [""]


# --- auth matrices


def auth_failures(auth: dict[str, dict]) -> list[str]:
    """Every cell whose code was not the expected one, as text."""
    return [f"{service} {matrix}: {c['rpc']} as {c['caller']}: expected {c['expected']}, got {c['got']}"
            for service, data in auth.items() for matrix, m in data["matrices"].items()
            for c in m["cells"] if c["got"] != c["expected"]]


def _cell(cell: dict) -> str:
    got = SHORT.get(cell["got"], cell["got"])
    return got if cell["got"] == cell["expected"] else f"**{got}** (expected {SHORT.get(cell['expected'], cell['expected'])})"


def render_auth(auth: dict[str, dict]) -> list[str]:
    out = [
        "## Auth and tenant isolation matrices",
        "",
        "`tests/integration/{scheduler,trainer,exporter}/test_auth_matrix.py` call every RPC as each kind of "
        "caller: no token, a token no one holds, read-only of team-a, member of team-a, member of team-b, admin, "
        "on team-a's resources (tokens map to tenants and roles in a token file). Rejected means UNAUTHENTICATED, "
        "PERMISSION_DENIED, or NOT_FOUND for another tenant's resource (as if absent). A cell accepted that should "
        "have been rejected, or any other code than the expected one, is a failed check.",
        "",
    ]
    rows = []
    for service in SERVICES:
        if service not in auth:
            rows.append([service, "not run", "", "", "", ""])
            continue
        cells = [c for m in auth[service]["matrices"].values() for c in m["cells"]]
        should = [c for c in cells if c["expected"] in REJECTED]
        leaked = [c for c in should if c["got"] not in REJECTED]
        other = [c for c in cells if c["got"] != c["expected"] and c not in leaked]
        rows.append([service, len(cells), len(should), sum(c["got"] == c["expected"] for c in should),
                     len(leaked), len(other)])
    out += table(["service", "calls", "to be rejected", "rejected as expected",
                  "accepted though it should have been rejected", "other codes than expected"], rows)
    failures = auth_failures(auth)
    out += ["", "### Failed checks", ""] + ([f"- {f}" for f in failures] if failures else ["None."])
    out += ["", "Codes by RPC and caller (UNAUTH = UNAUTHENTICATED, DENIED = PERMISSION_DENIED, "
            "PRECONDITION = FAILED_PRECONDITION, EXISTS = ALREADY_EXISTS):"]
    for service in SERVICES:
        for matrix, m in auth.get(service, {}).get("matrices", {}).items():
            by_rpc: dict[str, dict[str, dict]] = {}
            for c in m["cells"]:
                by_rpc.setdefault(c["rpc"], {})[c["caller"]] = c
            out += ["", f"**{service}: {matrix}** (commit `{m['commit']}`, {when(m['recorded'])})", ""]
            out += table(["rpc", *CALLERS], [[rpc, *[_cell(row[k]) if k in row else "" for k in CALLERS]]
                                             for rpc, row in by_rpc.items()])
    return out + [""]
