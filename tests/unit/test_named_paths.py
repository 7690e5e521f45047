"""Every repository path that README.md, docs/, the other Markdown files and the Python
docstrings and comments name exists in this repository: a file or folder (`services/common/peers.py`,
`serving/control/controller.py`, a sibling `predictor.py`), a test with the function it names
(`tests/unit/test_markers.py::test_the_category_markers_together_select_every_test_of_the_tree`),
a module (`paddleray.services.trainer.examples.digits_mlp:train`), or an output the
repository's .gitignore declares (`tests/reliability/results/fuzz.json`).

A path that leaves the repository (the team's notes beside the clone) or names a file it does
not hold (a serving-facts file, cited four times once) fails: a reader of a clean clone cannot
follow it.
"""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
# Names of a file a path is checked by: this repository's sources and docs. Other names
# (manifest.json, state.json, job.yaml) are checked only as paths from the top (examples/job.yaml).
SOURCE_SUFFIXES = ("py", "md", "proto", "lua")
_NAME = r"[\w.-]+"
# Not after a word, a path character or a placeholder's end: `bench/<name>_bench.py`, `lua/*_experiment.lua`.
_NOT_INSIDE = r"(?<![\w/.~$<>{}*@:-])"
_FILE = re.compile(_NOT_INSIDE + rf"((?:\.\.?/)*{_NAME}(?:/{_NAME})*\.(\w+))(?:::(\w+))?(?![\w/(])")
_MODULE = re.compile(_NOT_INSIDE + r"paddleray\.services((?:\.\w+)+)(?::(\w+))?")
# The files of a user's own project, named as examples (docs/your-code.md, services/common/packages.py):
# not ours, so not in the repository.
USER_FILES = frozenset({"json.py", "os.py", "x.py", "x/__init__.py", "a/b/c.py", "a/b/c/__init__.py",
                        "my_trainer/train/__init__.py", "my_project/train_digits.py"})


@dataclass(frozen=True)
class Repository:
    root: Path
    files: frozenset[str]

    @classmethod
    def of(cls, root: Path) -> Repository:
        # Tracked files and new ones not ignored (a file written but not added yet is the repository's).
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                cwd=root, capture_output=True, check=True).stdout
        return cls(root, frozenset(p for p in listed.decode().split("\0") if p and (root / p).exists()))

    @cached_property
    def folders(self) -> frozenset[str]:
        return frozenset(str(parent) for f in self.files for parent in Path(f).parents if str(parent) != ".")

    @cached_property
    def by_last_name(self) -> dict[str, list[str]]:
        """Files and folders by their last component."""
        index: dict[str, list[str]] = {}
        for path in sorted(self.files | self.folders):
            index.setdefault(path.rsplit("/", 1)[-1], []).append(path)
        return index

    @cached_property
    def top(self) -> frozenset[str]:
        return frozenset(f.split("/")[0] for f in self.files if "/" in f)

    @cached_property
    def from_top(self) -> re.Pattern[str]:
        """A path from one of the top folders, of any name (`deploy/gpu/Dockerfile`, `deploy/k8s/`)."""
        tops = "|".join(re.escape(t) for t in sorted(self.top))
        return re.compile(_NOT_INSIDE + rf"((?:{tops})/(?:{_NAME}/)*{_NAME}/?|(?:{tops})/)")

    def holds(self, path: str) -> bool:
        return path in self.files or path in self.folders

    def ignored(self, path: str) -> bool:
        """An output the repository declares in a .gitignore (a test's or a benchmark's results)."""
        return subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=self.root).returncode == 0

    def documents(self) -> Iterator[tuple[str, str]]:
        """(path, text) of every Markdown file and every Python file's docstrings and comments."""
        for path in sorted(self.files):
            if path.endswith(".md"):
                yield path, (self.root / path).read_text()
            elif path.endswith(".py") and not path.startswith("gen/"):
                yield path, prose((self.root / path).read_text())


def prose(source: str) -> str:
    """A module's docstrings and comments, one per line group (the code's own strings are not claims)."""
    parts = [ast.get_docstring(node, clean=False) or "" for node in ast.walk(ast.parse(source))
             if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)]
    parts += [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT]
    return "\n".join(parts)


def bad_paths(repo: Repository, document: str, text: str) -> list[str]:
    """The paths `document` names that the repository does not hold, as "document: path (why)"."""
    found = [_file_problem(repo, document, m.group(1), m.group(2), m.group(3)) for m in _FILE.finditer(text)]
    found += [_module_problem(repo, m.group(1).strip(".").split("."), m.group(2)) for m in _MODULE.finditer(text)]
    found += [_folder_problem(repo, m.group(1)) for m in repo.from_top.finditer(text)]
    return [f"{document}: {problem}" for problem in found if problem]


def _file_problem(repo: Repository, document: str, named: str, suffix: str, function: str | None) -> str | None:
    first = named.split("/")[0]
    if named in USER_FILES or not (suffix in SOURCE_SUFFIXES or first in repo.top or first == ".."):
        return None
    beside = os.path.normpath(Path(document).parent / named)
    if beside.startswith(".."):
        return f"{named} (outside the repository)"
    if repo.holds(beside):
        path = beside
    elif first in repo.top:  # a path from the top names exactly that
        path = named
    else:  # a module or file named by its last components: `common/paging.py`, a sibling `predictor.py`
        candidates = repo.by_last_name.get(named.rsplit("/", 1)[-1], [])
        path = next((f for f in candidates if f.endswith(f"/{named}")), named)
    if not repo.holds(path):
        return None if not path.startswith("..") and repo.ignored(path) else f"{named} (no such file in the repository)"
    if function and not re.search(rf"^\s*(async def|def|class) {function}\b", (repo.root / path).read_text(), re.M):
        return f"{named}::{function} (no such test in {path})"
    return None


def _folder_problem(repo: Repository, named: str) -> str | None:
    """A path from the top whose last name has no suffix (a folder, a Dockerfile); the others are _FILE's."""
    path = named.rstrip(".").rstrip("/")
    # A folder pattern (`results/`) matches only a path given as a folder: one not made yet (a
    # results folder before its tests ran) is asked both ways.
    if "." in path.rsplit("/", 1)[-1] or repo.holds(path) or repo.ignored(path) or repo.ignored(path + "/"):
        return None
    return f"{named} (no such file or folder in the repository)"


def _module_problem(repo: Repository, parts: list[str], attribute: str | None) -> str | None:
    """`paddleray.services.<parts>[:attribute]`: packages down to a module, then at most a name it holds."""
    folder = "services"
    for i, part in enumerate(parts):
        if f"{folder}/{part}/__init__.py" in repo.files:
            folder = f"{folder}/{part}"
            continue
        module = f"{folder}/{part}.py" if f"{folder}/{part}.py" in repo.files else f"{folder}/__init__.py"
        names = ([] if module.endswith(f"/{part}.py") else [part]) + parts[i + 1 : i + 2] + [attribute or ""]
        text = (repo.root / module).read_text()
        missing = [n for n in names if n and not re.search(rf"\b{re.escape(n)}\b", text)]
        dotted = "paddleray.services." + ".".join(parts) + (f":{attribute}" if attribute else "")
        return f"{dotted} (no {missing[0]} in {module})" if missing else None
    return f"paddleray.services.{'.'.join(parts)}:{attribute} (a package, not a module)" if attribute else None


@pytest.fixture(scope="module")
def repo() -> Repository:
    return Repository.of(ROOT)


def test_every_repository_path_the_docs_and_docstrings_name_exists(repo):
    documents = list(repo.documents())
    assert len(documents) > 300  # the tree was found
    assert [bad for document, text in documents for bad in bad_paths(repo, document, text)] == []


@pytest.mark.parametrize(("document", "text", "problem"), [
    ("README.md", "see `services/exporter/serving/contoller.py`", "no such file"),
    ("bench/REPORT.md", "(see ../shared/BENCHMARKS.md)", "no such file"),
    ("bench/__init__.py", "(see ../../shared/BENCHMARKS.md)", "outside the repository"),
    ("services/exporter/serving/replica/predictor.py", "measured (SERVING_FACTS.md section 8)", "no such file"),
    ("services/exporter/serving/README.md", "(`predicter.py`)", "no such file"),
    ("docs/reliability.md", "`tests/unit/test_markers.py::test_no_such_test`", "no such test"),
    ("docs/api.md", "`examples/loop.py`", "no such file"),
    ("README.md", "the image from `deploy/gpu/Dockerfil` (CUDA 12.6)", "no such file or folder"),
    ("docs/gpu.md", "the manifests in deploy/kuberai/.", "no such file or folder"),
    ("docs/cli.md", "paddleray.services.trainer.examples.digits_mlp:trian", "no trian in"),
    ("docs/cli.md", "paddleray.services.exporter.servng.controller", "no servng in"),
])
def test_a_planted_bad_path_is_found(repo, document, text, problem):
    found = bad_paths(repo, document, text)
    assert len(found) == 1 and problem in found[0] and found[0].startswith(f"{document}: "), found


@pytest.mark.parametrize(("document", "text"), [
    ("README.md", "`services/exporter/serving/control/controller.py`, `deploy/k8s/`, `tests/reliability/results/fuzz.json`"),
    ("services/exporter/serving/README.md", "`predictor.py`, `../README.md`, `bench/<name>_bench.py`"),
    ("docs/reliability.md", "tests/unit/test_markers.py::test_the_category_markers_together_select_every_test_of_the_tree"),
    ("services/scheduler/store.py", "lua/create_job.lua, common/paging.py, the user's json.py, manifest.json"),
    ("docs/cli.md", "paddleray.services.trainer.examples.digits_mlp:train, paddleray.services.common.peers.PeerSettings"),
])
def test_paths_the_repository_holds_pass(repo, document, text):
    assert bad_paths(repo, document, text) == []
