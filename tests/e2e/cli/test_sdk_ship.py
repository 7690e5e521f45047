"""The SDK ships a local working_dir itself (issue 19.3): Client.create_job given a job whose
working_dir is a directory outside the repo uploads it as a content-addressed package, queues the
job naming the package, and the job trains from it; a path that is not a directory is a SpecError
naming working_dir, before anything reaches the scheduler."""

from __future__ import annotations

import re

import pytest

from paddleray.scheduler.v1 import job_pb2
from paddleray.services.cli.jobs_commands import build_job
from paddleray.services.client import Client, ConnectionConfig, SpecError

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TRAIN = '''
def train(config, ctx):
    for epoch in range(config["epochs"]):
        ctx.report({"epoch": epoch, "loss": 1.0 / (epoch + 1)})
'''


def test_create_job_ships_a_local_working_dir_and_the_job_trains_from_the_package(address, tmp_path):
    project = tmp_path / "sdk_project"
    (project / "sdk_pkg").mkdir(parents=True)
    (project / "sdk_pkg" / "__init__.py").write_text("")
    (project / "sdk_pkg" / "fit.py").write_text(TRAIN)
    job = build_job("sdk_pkg.fit:train", {"epochs": 2})
    job.spec.runtime_env.working_dir = str(project)
    with Client(ConnectionConfig(address=address)) as client:
        created = client.create_job(job)
        shipped = created.spec.runtime_env.working_dir
        assert re.fullmatch(r"paddleray://packages/sha256-[0-9a-f]{64}", shipped), shipped
        assert job.spec.runtime_env.working_dir == str(project)  # the caller's job is not changed
        assert client.ship_directory(project) == shipped  # content-addressed: once per content
        done = client.wait_job(created.name, timeout=240)
    assert done.state == job_pb2.JOB_STATE_SUCCEEDED, done


def test_a_working_dir_that_is_not_a_directory_is_a_spec_error_naming_the_field(address, tmp_path):
    job = build_job("sdk_pkg.fit:train", {"epochs": 1})
    job.spec.runtime_env.working_dir = str(tmp_path / "missing")
    with Client(ConnectionConfig(address=address)) as client, pytest.raises(SpecError, match="working_dir"):
        client.create_job(job)
