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


# User code with no guard of its own (no unique_name.guard, no resets): it records what the
# worker hands it, then leaves the process as untidy as user code may.
UNGUARDED = '''
import os
import sys

import numpy as np
import paddle

CALLS = 0  # module state: a fresh worker imports the module anew


def train(config, ctx):
    global CALLS
    CALLS += 1
    seen = {
        "calls": CALLS, "float64": float(paddle.get_default_dtype() == "float64"),
        "static": float(not paddle.in_dynamic_mode()), "no_grad": float(not paddle.is_grad_enabled()),
        "env_leak": float("LEAKED_BY_A_CALL" in os.environ), "path_leak": float("/leaked/by/a/call" in sys.path),
        "cwd_leak": float(os.getcwd() == "/"), "flag_leak": float(paddle.get_flags(["FLAGS_check_nan_inf"])["FLAGS_check_nan_inf"]),
        "pid": os.getpid(),
    }
    paddle.seed(0)
    x = paddle.to_tensor(np.random.default_rng(0).normal(size=(64, 8)).astype("float32"))
    y = x.sum(axis=1, keepdim=True)
    model = paddle.nn.Sequential(paddle.nn.Linear(8, 16), paddle.nn.ReLU(), paddle.nn.Linear(16, 1))
    optimizer = paddle.optimizer.Adam(learning_rate=0.01, parameters=model.parameters())
    start = 0
    if ctx.latest_checkpoint is not None:
        model.set_state_dict(paddle.load(str(ctx.latest_checkpoint / "model.pdparams")))
        optimizer.set_state_dict(paddle.load(str(ctx.latest_checkpoint / "opt.pdopt")))
        start = ctx.checkpoint_manifest["epoch"]
    for epoch in range(start, config["epochs"]):
        for _ in range(5):
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
        checkpoint = ctx.make_checkpoint_dir()
        paddle.save(model.state_dict(), str(checkpoint / "model.pdparams"))
        paddle.save(optimizer.state_dict(), str(checkpoint / "opt.pdopt"))
        ctx.report({"epoch": epoch + 1, "loss": float(loss), **seen}, checkpoint=checkpoint)
        if start == 0 and epoch + 1 == config.get("fail_after_epoch"):
            raise RuntimeError("injected failure after epoch %d" % (epoch + 1))
    os.environ["LEAKED_BY_A_CALL"] = "1"
    sys.path.insert(0, "/leaked/by/a/call")
    os.chdir("/")
    paddle.set_flags({"FLAGS_check_nan_inf": True})
    paddle.set_default_dtype("float64")
    paddle.set_grad_enabled(False)
    paddle.enable_static()
'''


def test_a_retry_on_a_warm_worker_resumes_user_code_with_no_guard_to_the_same_loss(client, trainer, tmp_path):
    root = tmp_path / "unguarded"
    (root / "unguarded").mkdir(parents=True)
    (root / "unguarded" / "train.py").write_text(UNGUARDED)
    uri = _store(trainer.storage_root, root)

    def run(config: dict, resume_from: common_pb2.Checkpoint | None = None) -> run_pb2.Run:
        spec = common_pb2.TrainingSpec(
            entrypoint="unguarded.train:train", resources_per_worker=common_pb2.Resources(num_cpus=1),
            runtime_env=common_pb2.RuntimeEnv(working_dir=uri),
        )
        spec.config.update(config)
        request = trainer_service_pb2.StartRunRequest(spec=spec, resume_from=resume_from)
        return client.wait_done(client.stub.StartRun(request, timeout=60).run.name)

    uninterrupted = run({"epochs": 4})
    assert uninterrupted.state == run_pb2.RUN_STATE_SUCCEEDED, uninterrupted.state_reason

    failed = run({"epochs": 4, "fail_after_epoch": 2})
    assert failed.workers[0].warm, "the attempt that fails runs on the warm worker the first run left"
    assert failed.state == run_pb2.RUN_STATE_FAILED and "injected failure after epoch 2" in failed.state_reason
    assert failed.latest_checkpoint.epoch == 2

    # What the first call left behind is gone: the warm worker's call started as on a fresh one.
    seen = failed.latest_metrics.metrics
    assert seen["pid"] == uninterrupted.latest_metrics.metrics["pid"], "the second call ran in the first one's process"
    assert seen["calls"] == 1, "the package's modules are imported anew for each call"
    leaks = ("float64", "static", "no_grad", "env_leak", "path_leak", "cwd_leak", "flag_leak")
    assert {k: seen[k] for k in leaks} == dict.fromkeys(leaks, 0.0)

    # Retried from the checkpoint the warm worker saved (its optimizer state keyed by parameter
    # names), on whichever worker the pool gives (after a failure, a fresh one).
    resumed = run({"epochs": 4, "fail_after_epoch": 2}, resume_from=failed.latest_checkpoint)
    assert resumed.state == run_pb2.RUN_STATE_SUCCEEDED, resumed.state_reason
    assert resumed.latest_metrics.metrics["epoch"] == 4
    assert resumed.latest_metrics.metrics["loss"] == uninterrupted.latest_metrics.metrics["loss"], \
        "the retry ends with the identical loss"
