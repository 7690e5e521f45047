"""One real local stack (scheduler, trainer, exporter as processes, on the session's Ray head and
Redis) shared by the CLI tests of this folder, and helpers to run the CLI against it."""

from __future__ import annotations

import json
import os

import pytest
from support_cli import MODULE, Cli

from paddleray.services.localstack import stack


@pytest.fixture(scope="session")
def cli_stack(tmp_path_factory, redis_server, ray_head):
    state_dir = tmp_path_factory.mktemp("cli-stack") / ".paddleray" / "stack"
    allow = json.dumps(["paddleray.services.trainer.examples", MODULE])
    previous = os.environ.get("PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST")
    os.environ["PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST"] = allow
    try:
        state = stack.up(state_dir, redis_url=redis_server.url, ray_address=ray_head.address)
    finally:
        if previous is None:
            os.environ.pop("PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST")
        else:
            os.environ["PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST"] = previous
    yield state
    stack.down(state_dir)


@pytest.fixture
def address(cli_stack) -> str:
    return cli_stack.address("scheduler")


@pytest.fixture
def cli(address) -> Cli:
    return Cli(address)
