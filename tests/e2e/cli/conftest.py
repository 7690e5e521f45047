"""One real local stack (scheduler, trainer, exporter as processes, with a Redis and a Ray head
of its own, as `paddleray up` starts them) shared by the CLI tests of this folder, and helpers
to run the CLI against it.

Its own because the stack lives for the whole session, beside every later test:
- on the session's Redis, which each test's `redis_url` flushes, its scheduler dispatched the
  jobs later tests created and its exporter reconciled their deployments;
- on the shared Ray head, its exporter declared the whole of Ray Serve (deploy_apps), deleting
  every later test's model apps a second after they were deployed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from paddleray.services.localstack import stack
from paddleray.services.localstack.ports import pid_alive, wait_until
from support.cli import MODULE, Cli

NODE_CLIENT = Path(__file__).parents[3] / "clients" / "node"


# Package-scoped (tests/e2e/cli is a package for that): the stack, its Ray head and the Serve
# its exporter starts poll for as long as they live; session-scoped, they took about a quarter of
# a core from every test after the CLI's, to the end of the run.
@pytest.fixture(scope="package")
def cli_stack(tmp_path_factory):
    state_dir = tmp_path_factory.mktemp("cli-stack") / ".paddleray" / "stack"
    allow = json.dumps(["paddleray.services.trainer.examples", MODULE])
    previous = os.environ.get("PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST")
    os.environ["PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST"] = allow
    try:
        state = stack.up(state_dir, redis_url=None, num_cpus=2)
    finally:
        if previous is None:
            os.environ.pop("PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST")
        else:
            os.environ["PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST"] = previous
    try:
        _wait_started(state)
        yield state
    finally:
        stack.down(state_dir)


def _wait_started(state: stack.StackState) -> None:
    """Until each service wrote its ready file (after its start-up hook, e.g. the trainer's Ray
    connection): their health reports SERVING earlier, and a trainer that then fails to reach
    Ray on a loaded machine would leave every test waiting on jobs that never start."""
    def started() -> bool:
        for process in state.services.values():
            if not pid_alive(process.pid):
                tail = Path(process.log_file).read_text()[-2000:]
                raise RuntimeError(f"{process.name} exited during start-up:\n{tail}")
        return all((Path(state.state_dir) / f"{name}.ready.json").exists() for name in state.services)

    wait_until(started, timeout=240, interval=0.5, message="the stack's services to finish starting")


@pytest.fixture
def address(cli_stack) -> str:
    return cli_stack.address("scheduler")


@pytest.fixture
def cli(address) -> Cli:
    return Cli(address)


@pytest.fixture
def serving_cli(cli_stack) -> Cli:
    """The CLI for serving commands too: the scheduler from --address, the exporter from the
    stack's state file."""
    return Cli(cli_stack.address("scheduler"), "--stack-dir", cli_stack.state_dir)


@pytest.fixture(scope="session")
def node_client() -> Path:
    """clients/node with its npm packages installed from the lock file (`npm ci`, only when the
    lock changed), so CI needs nothing else."""
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "Node.js 20 and npm are needed for the Node client test (apt-get install nodejs npm)"
    lock = hashlib.sha256((NODE_CLIENT / "package-lock.json").read_bytes()).hexdigest()
    stamp = NODE_CLIENT / "node_modules" / ".paddleray-lock-sha256"
    if not stamp.exists() or stamp.read_text() != lock:
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_CLIENT, check=True, timeout=240,
                       capture_output=True)
        stamp.write_text(lock)
    return NODE_CLIENT
