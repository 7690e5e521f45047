"""deploy/*/Dockerfile linted without a Docker engine: base images and pins agree with pyproject.

No engine runs here, so the images are not built in CI; these checks catch what drifts
silently: a Paddle or Ray pin that no longer matches the package, a Python that does not
satisfy requires-python, a CUDA base that does not match the wheel index, a COPY of a path
that moved.
"""

from __future__ import annotations

import re
import shlex

import pytest

from support.deploy import DEPLOY, REPO, pin, pyproject

pytestmark = pytest.mark.unit


def instructions(name: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    lines, current = [], ""
    for raw in (DEPLOY / name / "Dockerfile").read_text().splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    assert not current, "dangling line continuation"
    parsed = []
    for line in lines:
        instruction, _, args = line.partition(" ")
        parsed.append((instruction.upper(), args.strip()))
    return parsed


def args_of(name: str, instruction: str) -> list[str]:
    return [args for ins, args in instructions(name) if ins == instruction]


def pip_installs(name: str) -> list[list[str]]:
    commands = []
    for run in args_of(name, "RUN"):
        for command in re.split(r"&&|;", run):
            words = shlex.split(command)
            if words[:2] == ["pip", "install"]:
                commands.append(words[2:])
    return commands


def requirement_pins(name: str) -> dict[str, str]:
    pins = {}
    for words in pip_installs(name):
        for word in words:
            if "==" in word:
                package, version = word.split("==")
                pins[package] = version
    return pins


def _python_minor() -> str:
    return re.search(r">=\s*(3\.\d+)", pyproject()["project"]["requires-python"]).group(1)


@pytest.mark.parametrize("name", ["cpu", "gpu"])
def test_instructions_are_known_and_the_image_runs_as_a_user(name):
    known = {"FROM", "ARG", "ENV", "RUN", "WORKDIR", "COPY", "USER", "CMD", "ENTRYPOINT", "EXPOSE", "LABEL"}
    parsed = instructions(name)
    assert {ins for ins, _ in parsed} <= known
    assert parsed[0][0] == "FROM"
    users = args_of(name, "USER")
    assert users and users[-1] not in ("root", "0")


@pytest.mark.parametrize("name", ["cpu", "gpu"])
def test_pins_match_pyproject(name):
    project = pyproject()["project"]
    pins = requirement_pins(name)
    assert pins["ray[serve,data]"] == pin("ray[", project["dependencies"])
    paddle = "paddlepaddle" if name == "cpu" else "paddlepaddle-gpu"
    extra = project["optional-dependencies"][name]
    assert pins[paddle] == pin(f"{paddle}==", extra)
    # The package itself, with the extra that names the same Paddle build.
    assert any(f".[{name}]" in words for words in pip_installs(name))
    for words in pip_installs(name):
        assert "--no-cache-dir" in words, f"pip cache left in the image: {words}"


def test_cpu_image_python_satisfies_requires_python():
    [base] = args_of("cpu", "FROM")
    assert base == f"python:{_python_minor()}-slim"


def test_gpu_image_cuda_matches_the_paddle_wheel_index():
    [base] = args_of("gpu", "FROM")
    match = re.fullmatch(r"nvidia/cuda:(\d+)\.(\d+)\.\d+-cudnn-runtime-ubuntu\d+\.\d+", base)
    assert match, base
    cuda = f"cu{match.group(1)}{match.group(2)}"
    [index] = [a.split("=", 1)[1] for a in args_of("gpu", "ARG") if a.startswith("PADDLE_INDEX=")]
    assert index.rstrip("/").endswith(f"/{cuda}")
    paddle_install = next(w for w in pip_installs("gpu") if any(x.startswith("paddlepaddle-gpu==") for x in w))
    assert "${PADDLE_INDEX}" in paddle_install
    python = f"python{_python_minor()}"
    assert any(python in run.split() for run in args_of("gpu", "RUN")), f"{python} is not installed"


@pytest.mark.parametrize("name", ["cpu", "gpu"])
def test_copied_paths_exist_and_are_not_dockerignored(name):
    ignored = {
        line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for args in args_of(name, "COPY"):
        *sources, _destination = args.split()
        for source in sources:
            assert (REPO / source).exists(), source
            assert source not in ignored, source
