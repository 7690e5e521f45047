"""python -m bench <name>|all [--quick] [--report]

Each benchmark is a module bench/<name>_bench.py with `run(quick: bool) -> dict` returning the
document built by bench.harness.result. The result is written to bench/results/<name>.json and
printed as the last line; bench/REPORT.md is regenerated from all results afterwards.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path

from bench import harness, report

BENCH_DIR = Path(__file__).resolve().parent


def available() -> list[str]:
    return sorted(p.name.removesuffix("_bench.py") for p in BENCH_DIR.glob("*_bench.py"))


def run_one(name: str, quick: bool) -> dict:
    module = importlib.import_module(f"bench.{name}_bench")
    doc = module.run(quick=quick)
    doc.setdefault("params", {})["quick"] = quick
    harness.write_result(doc)
    return doc


def main(argv: list[str] | None = None) -> int:
    names = available()
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", choices=[*names, "all", "report"], help="benchmark to run, 'all', or 'report' only")
    parser.add_argument("--quick", action="store_true", help="small run (under ~3 minutes per benchmark)")
    args = parser.parse_args(argv)
    os.environ.setdefault("GLOG_v", "0")
    os.environ.setdefault("GLOG_minloglevel", "2")
    failed = []
    if args.name != "report":
        for name in names if args.name == "all" else [args.name]:
            try:
                doc = run_one(name, args.quick)
            except Exception as exc:  # noqa: BLE001 - one broken benchmark must not hide the others
                failed.append(name)
                print(f"bench {name} failed: {exc!r}", file=sys.stderr)
                if args.name != "all":
                    raise
                continue
            print(json.dumps(doc, sort_keys=True), flush=True)
    report.write_report()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
