"""The virtual env of the stock tritonclient, created from the package index on first use.

tritonclient 2.73 pins protobuf < 7 while the project needs protobuf >= 7.35, so it lives in
.venv-triton (also `make triton-venv`; made again when REQUIREMENTS change), and only the wire connects it to our servers.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIENT_SCRIPT = ROOT / "tests" / "integration" / "serving" / "triton_client_script.py"
VENV = ROOT / ".venv-triton"
REQUIREMENTS = ["tritonclient[grpc,http]==2.73.0", "numpy"]


def triton_python() -> str:
    python = VENV / "bin" / "python"
    stamp = VENV / ".installed"
    if not stamp.exists() or stamp.read_text() != "\n".join(REQUIREMENTS) + "\n":
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *REQUIREMENTS], check=True, timeout=900)
        stamp.write_text("\n".join(REQUIREMENTS) + "\n")
    return str(python)
