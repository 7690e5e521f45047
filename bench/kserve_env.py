"""KServe's virtual env for the serving benchmark's peer, made from the package index on first use.

KServe pins protobuf < 7 while the project needs >= 7.35 (as tritonclient does: tests/support/
triton.py), so it lives in .venv-kserve beside the project's venv. Paddle is not installed
twice (700 MB, a minute of CI): a .pth file puts the project venv's site-packages after the
KServe venv's own, so KServe's pins (protobuf 6, its grpcio) win and Paddle is the very
install the Serve replicas run. The peer imports the project's serving modules that need no
protobuf (predictor.py, artifact.py) through a shim folder: a `paddleray` package whose
`services` is the repository's.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-kserve"
KSERVE = "kserve==0.21.0"


def requirements() -> list[str]:
    return [KSERVE]


def kserve_python() -> str:
    """The venv's python, made (or remade after the pin or the project venv changed) first."""
    python = VENV / "bin" / "python"
    stamp = VENV / ".installed"
    project_packages = sysconfig.get_paths()["purelib"]
    wanted = "\n".join([*requirements(), project_packages]) + "\n"
    if not stamp.exists() or stamp.read_text() != wanted:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *requirements()], check=True, timeout=1200)
        own = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
        # Read last: the venv's own packages (KServe's pins) come first on sys.path.
        (Path(own) / "zz-paddleray-project.pth").write_text(project_packages + "\n")
        stamp.write_text(wanted)
    return str(python)


def shim_path() -> str:
    """A folder holding `paddleray/` whose `services` is the repository's (PYTHONPATH for the peer)."""
    shim = Path(tempfile.mkdtemp(prefix="paddleray-kserve-shim-"))
    package = shim / "paddleray"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "services").symlink_to(ROOT / "services", target_is_directory=True)
    return str(shim)
