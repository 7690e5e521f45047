"""python -m bench <name>|all [--quick | --smoke [--results-dir DIR]] | report

Each benchmark is a module bench/<name>_bench.py (registered by existing) that declares
TARGETS and `run(quick: bool, smoke: bool = False) -> dict` returning the document built by
bench.harness.result (see bench/harness.py). The result is written to bench/results/<name>.json
and printed as the last line; bench/REPORT.md is regenerated from all results afterwards.
Smoke runs (what the test suite runs) write elsewhere, never over the recorded results.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from bench import harness, report

BENCH_DIR = Path(__file__).resolve().parent


def available() -> list[str]:
    """Every registered benchmark: bench/<name>_bench.py."""
    return sorted(p.name.removesuffix("_bench.py") for p in BENCH_DIR.glob("*_bench.py"))


def module(name: str) -> ModuleType:
    return importlib.import_module(f"bench.{name}_bench")


def run_one(name: str, mode: str, results_dir: Path | None = None) -> dict:
    bench = module(name)
    load_at_start = os.getloadavg()
    doc = bench.run(quick=mode != "full", smoke=True) if mode == "smoke" else bench.run(quick=mode == "quick")
    if doc["targets"] != bench.TARGETS:
        raise ValueError(f"{name}: the run's targets {doc['targets']} are not the declared TARGETS {bench.TARGETS}")
    harness.finish(doc, mode)
    # The machine is shared: how busy it was (1, 5, 15-minute load averages) belongs with the figures.
    doc.setdefault("machine", {})["load_avg"] = {"start": load_at_start, "end": os.getloadavg()}
    harness.write_result(doc, results_dir)
    return doc


def main(argv: list[str] | None = None) -> int:
    names = available()
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", choices=[*names, "all", "report"], help="benchmark to run, 'all', or 'report' only")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small run (under ~3 minutes per benchmark), indicative only")
    size.add_argument("--smoke", action="store_true", help="tiny sizes, one round: checks that it runs, decides nothing")
    parser.add_argument("--results-dir", type=Path, help="where results go (smoke runs: a temporary folder by default)")
    args = parser.parse_args(argv)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    results_dir = args.results_dir
    if mode == "smoke" and results_dir is None:
        results_dir = Path(tempfile.gettempdir()) / "paddleray-bench-smoke"
    os.environ.setdefault("GLOG_v", "0")
    os.environ.setdefault("GLOG_minloglevel", "2")
    failed = []
    if args.name != "report":
        for name in names if args.name == "all" else [args.name]:
            try:
                doc = run_one(name, mode, results_dir)
            except Exception as exc:  # noqa: BLE001 - one broken benchmark must not hide the others
                failed.append(name)
                print(f"bench {name} failed: {exc!r}", file=sys.stderr)
                if args.name != "all":
                    raise
                continue
            print(json.dumps(doc, sort_keys=True), flush=True)
    if results_dir is None:
        report.write_report()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
