"""Runs of uploaded packages on the real trainer: each run gets exactly its package's code
(a warm worker is reused only for the same digest), and only the package's own modules may
run besides the allowlist."""

from __future__ import annotations

import grpc
import pytest

from paddleray.common.v1 import common_pb2
from paddleray.services.client.packaging import build_package
from paddleray.services.common import packages
from paddleray.trainer.v1 import run_pb2, trainer_service_pb2

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TRAIN = (
    "import os\n"
    "from my_trainer import version\n"
    "def train(config, ctx):\n"
    "    print('running version', version.VERSION, 'pid', os.getpid(), flush=True)\n"
    "    ctx.report({'version': version.VERSION, 'pid': os.getpid()})\n"
)


def _store(storage_root, root) -> str:
    """What the scheduler's UploadPackage leaves on the shared storage root; returns the URI."""
    package = build_package(root)
    path = packages.zip_path(storage_root, package.sha256)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(package.data)
    return package.uri


def _write_project(root, version: int) -> None:
    (root / "my_trainer").mkdir(parents=True, exist_ok=True)
    (root / "my_trainer" / "train.py").write_text(TRAIN)
    (root / "my_trainer" / "version.py").write_text(f"VERSION = {version}\n")


def _start(client, uri: str, entrypoint: str = "my_trainer.train:train") -> run_pb2.Run:
    spec = common_pb2.TrainingSpec(
        entrypoint=entrypoint, resources_per_worker=common_pb2.Resources(num_cpus=1),
        runtime_env=common_pb2.RuntimeEnv(working_dir=uri),
    )
    return client.stub.StartRun(trainer_service_pb2.StartRunRequest(spec=spec), timeout=60).run


def test_an_edited_package_runs_its_new_code_and_a_warm_worker_serves_only_its_own_package(client, trainer, tmp_path):
    root = tmp_path / "project"
    _write_project(root, version=1)
    first_uri = _store(trainer.storage_root, root)
    first = client.wait_done(_start(client, first_uri).name)
    assert first.state == run_pb2.RUN_STATE_SUCCEEDED, first.state_reason
    assert first.latest_metrics.metrics["version"] == 1

    again = client.wait_done(_start(client, first_uri).name)
    assert again.state == run_pb2.RUN_STATE_SUCCEEDED, again.state_reason
    assert again.workers[0].warm, "the same package reuses its warm worker"
    assert again.latest_metrics.metrics["pid"] == first.latest_metrics.metrics["pid"]

    # The regression: a warm worker that imported my_trainer.version keeps the old module.
    _write_project(root, version=2)
    second_uri = _store(trainer.storage_root, root)
    assert second_uri != first_uri
    second = client.wait_done(_start(client, second_uri).name)
    assert second.state == run_pb2.RUN_STATE_SUCCEEDED, second.state_reason
    assert second.latest_metrics.metrics["version"] == 2, "the edited file's code runs"
    assert not second.workers[0].warm
    assert second.latest_metrics.metrics["pid"] != first.latest_metrics.metrics["pid"]
    assert {i.group.spec.env.working_dir for i in trainer.pool._idle} <= {first_uri, second_uri}


def test_only_the_packages_own_modules_may_run(client, trainer, tmp_path):
    root = tmp_path / "project"
    _write_project(root, version=1)
    # A namespace folder named like an installed package: `sklearn.base` is still the installed one.
    (root / "sklearn").mkdir()
    (root / "sklearn" / "base.py").write_text("def clone(config, ctx):\n    ctx.report({'hijacked': 1})\n")
    uri = _store(trainer.storage_root, root)

    with pytest.raises(grpc.RpcError) as denied:
        _start(client, uri, "my_trainer.missing:train")
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "my_trainer.missing" in denied.value.details()

    with pytest.raises(grpc.RpcError) as missing:
        _start(client, "paddleray://packages/sha256-" + "0" * 64)
    assert missing.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "spec.runtime_env.working_dir" in missing.value.details()

    borrowed = client.wait_done(_start(client, uri, "sklearn.base:clone").name)
    assert borrowed.state == run_pb2.RUN_STATE_FAILED
    assert "was loaded from" in borrowed.state_reason and "not from the job's package" in borrowed.state_reason
    assert "hijacked" not in borrowed.latest_metrics.metrics


def test_a_package_that_would_replace_what_the_workers_import_is_refused(client, trainer, tmp_path):
    root = tmp_path / "project"
    _write_project(root, version=1)
    (root / "json.py").write_text("def loads(config, ctx):\n    pass\n")
    with pytest.raises(grpc.RpcError) as refused:
        _start(client, _store(trainer.storage_root, root))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.runtime_env.working_dir: the package's top-level json would replace" in refused.value.details()
