"""Generate Python code (+ .pyi stubs) from protos/ into gen/python/.

The only writer of gen/python: run it through `make protos`. `--check` regenerates into a
temporary directory and fails when the committed code differs (CI uses it to catch stale
generated code).
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

import grpc_tools
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
OUT_ROOT = ROOT / "gen" / "python"
WELL_KNOWN = Path(grpc_tools.__file__).parent / "_proto"
INIT_TEXT = '"""Generated from protos/ by scripts/gen_protos.py. Do not edit."""\n'


def generate(out: Path) -> None:
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    out.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{WELL_KNOWN}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    # protoc writes no __init__.py; every generated directory is a regular package so that
    # setuptools can map it and type checkers see it.
    for directory in [out / "paddleray", *(p for p in (out / "paddleray").rglob("*") if p.is_dir())]:
        (directory / "__init__.py").write_text(INIT_TEXT)


def _differences(left: Path, right: Path) -> list[str]:
    cmp = filecmp.dircmp(left, right, ignore=["__pycache__"])
    found = [f"only in {left}: {n}" for n in cmp.left_only]
    found += [f"only in {right}: {n}" for n in cmp.right_only]
    found += [f"differs: {left / n}" for n in cmp.diff_files]
    for sub in cmp.common_dirs:
        found += _differences(left / sub, right / sub)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if gen/python is stale")
    args = parser.parse_args()
    if not args.check:
        shutil.rmtree(OUT_ROOT, ignore_errors=True)
        generate(OUT_ROOT)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        generate(fresh)
        stale = _differences(fresh / "paddleray", OUT_ROOT / "paddleray") if OUT_ROOT.exists() else ["gen/python missing"]
    if stale:
        print("generated code is stale; run `make protos`:\n  " + "\n  ".join(stale), file=sys.stderr)
        return 1
    print("generated code is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
