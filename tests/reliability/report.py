"""Writes docs/reliability.md from the reliability suite's results (`make reliability-report`).

    python -m tests.reliability.report [--results fuzz.json ...] [--results-dir DIR] [--out docs/reliability.md]

The fuzz figures come from the results files named, else from tests/reliability/results/fuzz.json
when a soak run wrote it; without either, the measured part of the fuzz section already in
--out is kept as it is (the committed one adds up soak runs that no CI run repeats). The load,
fault-injection and auth sections come from the results directory (report_figures.py). The
fault-injection tests are listed here; each entry is checked against the test files, so a
renamed or removed test fails the report instead of being claimed.
"""

from __future__ import annotations

import argparse
import ast
import collections
import datetime
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

try:
    from . import report_figures as figures
except ImportError:  # imported as `reliability.report` by the tests, with tests/ on sys.path
    from reliability import report_figures as figures  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = Path(os.environ.get("PADDLERAY_RELIABILITY_RESULTS_DIR", Path(__file__).parent / "results"))
RESULTS = RESULTS_DIR / "fuzz.json"
OUT = ROOT / "docs" / "reliability.md"
FUZZ_HEADING = "## Fuzzing every RPC"
# The fuzz section's measured part ends here; the findings below it are written from FINDINGS.
FINDINGS_HEADING = "### Findings the fuzzing made, and their regression tests"
SERVICES = ("scheduler", "trainer", "exporter")
FORBIDDEN = ("INTERNAL", "UNKNOWN")


@dataclass(frozen=True)
class FaultTest:
    path: str
    name: str
    fault: str
    proves: str


FAULT_TESTS = (
    FaultTest("tests/integration/scheduler/test_crash_safety.py", "test_sigkill_and_restart_every_job_finishes_exactly_once",
              "scheduler process SIGKILLed twice while runs are in flight, restarted on the same Redis",
              "6 jobs (2 failing once) all SUCCEED with exactly the expected attempts; the trainer created each "
              "run once; the retry resumed from its checkpoint (step 4); no job ran twice at a time"),
    FaultTest("tests/integration/scheduler/test_crash_safety.py", "test_two_replicas_never_dispatch_one_job_twice",
              "two scheduler replicas on one Redis, creates split between them",
              "40 jobs each dispatched once, none overlapping"),
    FaultTest("tests/integration/scheduler/test_experiments_crash.py",
              "test_sigkill_mid_sweep_loses_and_duplicates_no_trial",
              "scheduler SIGKILLed twice during a 10-trial sweep",
              "the sweep SUCCEEDS with exactly its 10 trials, one per grid value: no trial lost or duplicated"),
    FaultTest("tests/integration/scheduler/test_experiments_domain.py",
              "test_reconcile_carries_out_an_asha_stop_decided_before_a_crash",
              "a crash between an ASHA stop decision and its execution",
              "reconciliation after restart carries the decided stop out"),
    FaultTest("tests/integration/scheduler/test_redis_secure.py", "test_redis_going_away_and_back_under_a_running_scheduler",
              "Redis (password, TLS, AOF fsync always) stopped under a running scheduler, then restarted",
              "every RPC answers UNAVAILABLE without leaking the address, acknowledged jobs are all there after the "
              "restart, one log line per outage and no traceback"),
    FaultTest("tests/integration/scheduler/test_redis_secure.py", "test_a_wrong_redis_password_is_unavailable_and_not_serving",
              "a wrong Redis password", "UNAVAILABLE and health NOT_SERVING, not INTERNAL"),
    FaultTest("tests/integration/trainer/test_lifecycle.py",
              "test_a_killed_run_resumes_from_its_last_checkpoint_without_losing_epochs",
              "the rank's process dies mid-epoch (epoch 5 of 6)",
              "the run FAILS as WORKER_LOST with the checkpoint of epoch 4; the resumed run trains epochs 5-6 only "
              "and ends with the same weights as an uninterrupted run"),
    FaultTest("tests/integration/trainer/test_distributed.py", "test_a_killed_actor_fails_the_run_with_its_rank",
              "ray.kill of rank 0's actor in a 2-rank run",
              "the run FAILS as WORKER_LOST naming rank 0"),
    FaultTest("tests/integration/trainer/test_distributed.py",
              "test_a_rank_that_exits_fails_the_run_while_its_peer_waits_in_a_collective",
              "one rank exits while its peer waits in a collective", "the run fails instead of hanging"),
    FaultTest("tests/integration/trainer/test_runs.py", "test_runs_survive_a_trainer_restart",
              "a second trainer started on the first one's storage",
              "the finished run and its whole event stream are served unchanged"),
    FaultTest("tests/unit/trainer/test_runs_registry.py", "test_a_run_active_when_the_trainer_restarted_fails_as_a_trainer_error",
              "a trainer restart with a run active", "the run ends FAILED as a trainer error, not left RUNNING"),
    FaultTest("tests/e2e/test_trainer_ray_connection.py",
              "test_a_head_restart_fails_the_active_run_and_the_trainer_reconnects",
              "the trainer's Ray head stopped under an active run, then started again",
              "the run FAILS with a reason, the trainer is NOT_SERVING and refuses StartRun (UNAVAILABLE) while the "
              "head is away, then serves again and runs a job on the new head"),
    FaultTest("tests/e2e/test_trainer_ray_connection.py",
              "test_not_serving_and_unavailable_until_connected_never_attaching_elsewhere",
              "calls while the trainer is not yet connected to Ray",
              "NOT_SERVING and UNAVAILABLE until connected; it never attaches to another cluster"),
    FaultTest("tests/integration/exporter/test_restart.py",
              "test_an_exporter_killed_mid_export_leaves_the_version_failed_not_exporting",
              "exporter process SIGKILLed mid-export, a second one started",
              "the version ends FAILED (WORKER_LOST), never stuck EXPORTING, no half-written manifest"),
    FaultTest("tests/integration/exporter/test_restart.py", "test_the_exporter_is_not_serving_while_redis_is_unreachable",
              "Redis unreachable", "the exporter reports NOT_SERVING"),
    FaultTest("tests/integration/exporter/test_restart.py",
              "test_the_exporter_is_not_serving_and_exports_nothing_while_ray_is_unreachable",
              "Ray unreachable", "NOT_SERVING and no export started"),
    FaultTest("tests/integration/serving/test_restart.py", "test_serving_again_after_a_ray_head_restart",
              "the Ray head under Ray Serve restarted", "the deployments serve inference again"),
    FaultTest("tests/reliability/test_redis_outages.py",
              "test_a_create_retried_after_a_redis_restart_gets_its_job_and_nothing_fails_once_redis_is_back",
              "a CreateJob's reply lost after Redis ran it, then Redis (AOF) SIGKILLed and restarted under the scheduler",
              "the create is answered UNAVAILABLE and the client's retry with its request_id gets that very job; "
              "no job lost or made twice; from the first call after Redis is back none fails on a dead connection"),
    FaultTest("tests/reliability/test_redis_outages.py", "test_the_exporter_logs_a_redis_outage_once_without_a_traceback",
              "Redis SIGKILLed for 6 s under a running exporter process, then restarted",
              "one log line when the outage starts and one when it ends, nothing per pass and no traceback"),
    FaultTest("tests/reliability/test_lost_store.py", "test_an_empty_redis_freezes_serving_until_restored_or_confirmed",
              "the exporter's Redis (AOF) SIGKILLed and started empty under a served model, then its data restored; "
              "lost again and confirmed by an operator",
              "Serve keeps the model RUNNING while the store is lost (10 s, the old code deleted it in 3-8 s), health "
              "NOT_SERVING, changes refused FAILED_PRECONDITION, one ERROR naming the reason; restored: SERVING and "
              "HEALTHY as before; confirmed: the empty state applied (the model deleted)"),
    FaultTest("tests/reliability/test_head_crash_loop.py", "test_serving_is_back_after_every_sigkill_of_the_ray_head",
              "the Ray head's process group SIGKILLed under a served model (an exporter process under the local "
              "stack's supervisor) and started again on its port, 10 times in a row (2 in the default profile)",
              "after every crash the exporter exits (code 75), is started again on its old port in a fresh "
              "process, deploys again, and an inference answers with the model's own outputs; no SIGSEGV, and "
              "clients see UNAVAILABLE or their deadline meanwhile (Serve's HAProxy 503 page through "
              "paddleray-haproxy, and the server app's UNAVAILABLE for a model whose app is not deployed "
              "again yet: never INTERNAL, UNKNOWN or NOT_FOUND); per round the seconds from the crash and "
              "from the head's restart to the first OK inference"),
    FaultTest("tests/integration/localstack/test_supervisor.py",
              "test_a_killed_service_comes_back_on_its_port_and_a_stopped_supervisor_stops_it",
              "a service of the local stack SIGKILLed",
              "its supervisor starts it again on its old port and logs the restart; stopped, it stops the service "
              "and restarts nothing"),
    FaultTest("tests/reliability/test_deployments_apart.py", "test_a_deployment_waiting_for_resources_holds_no_other_change",
              "a deployment whose replica waits for resources no node has free, beside two that serve",
              "a traffic update of another deployment is HEALTHY and a delete of a third applied in seconds (they "
              "waited 353 s and 5 min 50 s); the waiting one says UNHEALTHY, insufficient resources"),
    FaultTest("tests/e2e/cli/test_sdk_resume.py", "test_watch_job_resumes_after_the_scheduler_restarts",
              "the scheduler restarted under a client's WatchJob", "the SDK resumes the stream, missing no event"),
    FaultTest("tests/e2e/cli/test_sdk_resume.py", "test_followed_logs_resume_after_the_scheduler_restarts",
              "the scheduler restarted under followed logs", "the SDK resumes the log stream"),
)


# Found with this suite (a run before the fix); the defects issue 13 listed (undecodable bytes,
# NaN configs, deep Structs, ASHA bounds, ...) were fixed before it ran and are not repeated here.
FINDINGS = (
    ("ExportModel with a NUL in `checkpoint_uri` answered INTERNAL (Path.resolve raised ValueError)",
     "export_spec: INVALID_ARGUMENT naming `checkpoint_uri`",
     "`tests/unit/exporter/test_export_spec.py::test_a_checkpoint_uri_with_a_nul_character_is_invalid_naming_the_field`"),
    ("a NUL in a spec's `datasets[].uri` (also `working_dir`, `init_from.*`) was accepted by CreateJob and made "
     "the trainer's StartRun raise ValueError (INTERNAL); found by probing the same mechanism after the "
     "ExportModel finding, not by a fuzz run",
     "common.training_spec: paths and URIs must not contain NUL, at both services",
     "`tests/unit/common/test_training_spec.py::test_the_scheduler_and_the_trainer_refuse_alike` (3 NUL cases)"),
)


# What an operator does when a fault needs one (written into the report as it is).
OPERATOR_NOTES = (
    "## What an operator does",
    "",
    "### The exporter's Redis came back empty (`serving frozen` in its log)",
    "",
    "A Redis that returns without its data (a failover to an empty replica, a lost volume) no longer "
    "tears serving down (`services/exporter/store/store_guard.py`; test "
    "`tests/reliability/test_lost_store.py`). The exporter tells it from a user's deletes: its installation "
    "marker (`paddleray:exp:installation`) is gone or another, or Ray Serve runs models that the store does "
    "not record (the GCS record of the installation that manages Serve names what it last applied). Then it "
    "applies and deletes nothing (Serve keeps answering every model it served), reports health NOT_SERVING, "
    "refuses CreateDeployment, UpdateDeployment and DeleteDeployment with FAILED_PRECONDITION naming the "
    "reason, logs `serving frozen: <reason>` once at ERROR, and records the reason in the store "
    "(`paddleray:exp:store-lost`), so a restarted exporter stays frozen too. Inference keeps working; only "
    "changes wait. The operator either:",
    "",
    "1. restores the store: bring back the Redis data (the replica or volume that has it, or a backup's RDB / "
    "AOF files). The restored data has its marker and no `store-lost` record: the next pass (within "
    "`reconcile_interval_s`) resumes, health says SERVING, and nothing is redeployed that still runs; or",
    "2. confirms that what the store now holds is meant (the deployments are gone for good): run "
    "`python -m paddleray.services.exporter.store.store_guard confirm` with the exporter's environment "
    "(`PADDLERAY_EXPORTER_REDIS_URL`, e.g. `kubectl exec deployment/paddleray-exporter -- python -m "
    "paddleray.services.exporter.store.store_guard confirm`). The next pass applies the store's state: every "
    "model it does not record is deleted from Serve, and the exporter serves again. Deployments are then "
    "created anew (their versions must be exported again if the registry went with the store). "
    "`... store_guard status` says whether the store is marked lost and why.",
    "",
    "Exports in flight when the registry vanished end with it; models on the storage root are kept.",
    "",
)


def check_fault_tests() -> list[str]:
    """The listed tests that no longer exist (file or function)."""
    missing = []
    for test in FAULT_TESTS:
        path = ROOT / test.path
        defined = set()
        if path.exists():
            defined = {n.name for n in ast.walk(ast.parse(path.read_text()))
                       if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        if test.name not in defined:
            missing.append(f"{test.path}::{test.name}")
    return missing


def recording_tests() -> set[str]:
    """The listed tests that record figures (they take the `fault_figures` fixture)."""
    found = set()
    for test in FAULT_TESTS:
        path = ROOT / test.path
        if not path.exists():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == test.name
                    and any(a.arg == "fault_figures" for a in node.args.args)):
                found.add(test.name)
    return found


def fuzz_section(results: dict) -> list[str]:
    """The fuzz section's measured part, from a results dict (one run or several merged)."""
    rows = results["requests"]
    by_service: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    by_kind: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    by_method: dict[tuple[str, str], collections.Counter] = collections.defaultdict(collections.Counter)
    for row in rows:
        by_service[row["service"]][row["code"]] += row["count"]
        by_kind[row["service"]][row["kind"]] += row["count"]
        by_method[(row["service"], row["method"])][row["code"]] += row["count"]
    codes = sorted({row["code"] for row in rows}, key=lambda c: (c != "OK", c))
    started = datetime.datetime.fromtimestamp(results["started"], datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    total = sum(row["count"] for row in rows)
    forbidden = sum(row["count"] for row in rows if row["code"] in FORBIDDEN)
    out = [
        FUZZ_HEADING,
        "",
        f"Run: profile `{results['profile']}`, commit `{results['commit']}`"
        + (f" ({results['runs']} runs added up)" if results.get("runs", 1) > 1 else "") + f", started {started}, "
        f"{results['duration_s']} s, {total:,} requests, {forbidden} answered INTERNAL or UNKNOWN, "
        f"{results['failure_count']} failed checks.",
        "",
        "Each service runs in-process behind a real gRPC server and channel (the scheduler on a real "
        "redis-server with the scripted fake trainer behind it; the trainer and the exporter on the "
        "session's real Ray head; the exporter on real Redis). Every RPC of JobService, "
        "ExperimentService, PackageService, TrainerService and ExporterService gets these kinds of input "
        "through a generic method with identity serializers:",
        "",
        "- `message`: requests built from the RPC's descriptor with any subset of fields set to hostile "
        "values: huge strings (up to 1.1 M characters), `../` and other odd resource names, names that "
        "exist (so some calls pass the name check), NaN / infinities / 1.8e305 / int64 limits, enum "
        "numbers no one defined, Structs 30-120 levels deep or 20,000 keys wide, Durations and Timestamps "
        "outside their range, 5,000-item repeated fields.",
        "- `mutation`: a valid request (a job, a sweep, a StartRun that passes every check and is then refused "
        "as ALREADY_EXISTS (the seed run's id), an export of a checkpoint that does not exist, a deployment, the name of a resource that exists) with one field, at "
        "any depth, set to such a value: each validation rule is reached on its own, past the checks the rest "
        "of the request passes.",
        "- `garbage`: bytes that do not decode as the request: its field numbers with the wrong wire type, "
        "truncated lengths, unterminated groups, invalid UTF-8 in string fields, random bytes.",
        "- `oversized`: one 65 MiB request per service (the servers accept 64 MiB).",
        "",
        "Each call is checked: never INTERNAL or UNKNOWN; a rejected Create/Update/Delete/Cancel/Start/Stop/"
        "Export/Upload leaves the service's resources as they were (names listed before and after; the "
        "exporter's model labels and display names); the service answers health SERVING after each test.",
        "",
        "### Requests by service and status code",
        "",
    ]
    out += figures.table(["service", "requests", *codes],
                  [[s, f"{sum(by_service[s].values()):,}", *[f"{by_service[s][c]:,}" for c in codes]]
                   for s in SERVICES if s in by_service])
    out += ["", "### Requests by service and input kind", ""]
    kinds = ("message", "mutation", "garbage", "oversized")
    out += figures.table(["service", *kinds], [[s, *[f"{by_kind[s][k]:,}" for k in kinds]] for s in SERVICES if s in by_kind])
    out += ["", "### Requests by RPC", ""]
    out += figures.table(["service", "rpc", "requests", *codes],
                  [[s, m, f"{sum(c.values()):,}", *[f"{c[code]:,}" for code in codes]]
                   for (s, m), c in sorted(by_method.items(), key=lambda kv: (SERVICES.index(kv[0][0]), kv[0][1]))])
    out += ["", "### Failed checks", ""]
    if results["failures"]:
        out += figures.table(["service", "rpc", "kind", "problem", "request (shortened)"],
                      [[f["service"], f["method"], f["kind"], f["problem"][:160],
                        "`" + f["request"][:160].replace("|", "\\|").replace("`", "'").replace("\n", " ") + "`"]
                       for f in results["failures"]])
    else:
        out.append("None.")
    return out + [""]


def previous_fuzz_section(report_text: str) -> list[str] | None:
    """The measured part of the fuzz section of a report written before, if it has one."""
    start = report_text.find(FUZZ_HEADING)
    end = report_text.find(FINDINGS_HEADING, start)
    return report_text[start:end].split("\n")[:-1] if start >= 0 and end >= 0 else None


def render(fuzz: dict | list[str], load: dict | None = None, faults: dict[str, dict] | None = None,
           auth: dict[str, dict] | None = None) -> str:
    """The whole report. `fuzz`: fuzz results, or the lines of a fuzz section kept from before."""
    out = [
        "# Reliability report",
        "",
        "Generated by `make reliability-report` (`python -m tests.reliability.report`) from the results of "
        "`tests/reliability/` and of the fault-injection and auth-matrix tests; do not edit by hand.",
        "",
        *(fuzz_section(fuzz) if isinstance(fuzz, dict) else fuzz),
        FINDINGS_HEADING,
        "",
        *figures.table(["finding", "fixed by", "regression test"], [list(f) for f in FINDINGS]),
        "",
        *figures.render_load(load),
        *figures.render_faults(FAULT_TESTS, faults or {}, recording_tests()),
        *OPERATOR_NOTES,
        *figures.render_auth(auth or {}),
    ]
    return "\n".join(out).rstrip("\n") + "\n"


def merge(runs: list[dict]) -> dict:
    """Several runs as one: counts added up, failures joined, the earliest start."""
    if len(runs) == 1:
        return runs[0]
    counts: collections.Counter = collections.Counter()
    for run in runs:
        for row in run["requests"]:
            counts[(row["service"], row["method"], row["kind"], row["code"])] += row["count"]
    return {
        "profile": "+".join(sorted({r["profile"] for r in runs})),
        "commit": "+".join(dict.fromkeys(r["commit"] for r in runs)),
        "started": min(r["started"] for r in runs),
        "duration_s": round(sum(r["duration_s"] for r in runs), 1),
        "requests": [{"service": s, "method": m, "kind": k, "code": c, "count": n}
                     for (s, m, k, c), n in sorted(counts.items())],
        "failures": [f for r in runs for f in r["failures"]],
        "failure_count": sum(r["failure_count"] for r in runs),
        "runs": len(runs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, nargs="+",
                        help="fuzz results files; several (e.g. one run per service) are added up")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR,
                        help="where the load, fault-injection and auth tests wrote their results")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    fuzz = _fuzz(args)
    if fuzz is None:
        return 2
    missing = check_fault_tests()
    if missing:
        print("fault-injection tests listed in the report no longer exist:\n  " + "\n  ".join(missing), file=sys.stderr)
        return 1
    load, faults, auth = figures.load_results(args.results_dir)
    args.out.write_text(render(fuzz, load, faults, auth))
    print(f"wrote {args.out}")
    failed = figures.auth_failures(auth)
    if failed:
        print("auth matrix cells with another code than expected:\n  " + "\n  ".join(failed), file=sys.stderr)
        return 1
    return 0


def _fuzz(args) -> dict | list[str] | None:
    """The fuzz results named, else a soak run's, else the section the report has now."""
    if args.results:
        for path in args.results:
            if not path.exists():
                print(f"{path} is missing: run `PADDLERAY_SOAK=1 pytest tests/reliability` first", file=sys.stderr)
                return None
        return merge([json.loads(path.read_text()) for path in args.results])
    # The fuzz results live beside the others (--results-dir; the harness writes them there too).
    soak = args.results_dir / RESULTS.name
    if soak.exists() and (latest := json.loads(soak.read_text()))["profile"] == "soak":
        return latest
    kept = previous_fuzz_section(args.out.read_text()) if args.out.exists() else None
    if kept is None:
        print(f"no soak fuzz results ({soak}) and no fuzz section in {args.out} to keep: run "
              "`PADDLERAY_SOAK=1 pytest tests/reliability` first", file=sys.stderr)
        return None
    print(f"fuzz section kept from {args.out} (no soak results in {soak})", file=sys.stderr)
    return kept


if __name__ == "__main__":
    sys.exit(main())
