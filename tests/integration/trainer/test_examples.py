"""The built-in digits examples run through the real trainer over gRPC on the shared Ray head."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import paddle
import pytest
from google.protobuf import duration_pb2, struct_pb2

from paddleray.common.v1 import common_pb2
from paddleray.services.trainer.examples import digits_data, loop
from paddleray.trainer.v1 import run_pb2, trainer_service_pb2

pytestmark = pytest.mark.integration

EXAMPLES = "paddleray.services.trainer.examples"


@pytest.fixture
def examples_client(client, trainer, monkeypatch):
    """The session's trainer, allowed to run the examples for the length of a test."""
    monkeypatch.setattr(trainer.settings, "entrypoint_allowlist", [*trainer.settings.entrypoint_allowlist, EXAMPLES])
    return client


def _start(
    client, model: str, config: dict, num_workers: int = 1, datasets=(), resume_from=None, wait=True, policy=None
) -> run_pb2.Run:
    struct = struct_pb2.Struct()
    struct.update(config)
    spec = common_pb2.TrainingSpec(
        entrypoint=f"{EXAMPLES}.{model}:train",
        config=struct,
        num_workers=num_workers,
        resources_per_worker=common_pb2.Resources(num_cpus=1),
        datasets=list(datasets),
        checkpoint_policy=policy,
    )
    request = trainer_service_pb2.StartRunRequest(spec=spec, resume_from=resume_from)
    run = client.stub.StartRun(request, timeout=30).run
    if not wait:
        return run
    done = client.wait_done(run.name, timeout=240)
    assert done.state == run_pb2.RUN_STATE_SUCCEEDED, done.state_reason
    return done


def _params(checkpoint: common_pb2.Checkpoint) -> dict[str, np.ndarray]:
    state = paddle.load(str(Path(checkpoint.uri) / loop.MODEL_FILE))
    return {k: v.numpy() for k, v in state.items()}


def _epochs_reported(client, run: run_pb2.Run) -> list[float]:
    events = client.stub.WatchRun(trainer_service_pb2.WatchRunRequest(name=run.name), timeout=60)
    return [r.event.metrics.metrics["epoch"] for r in events if r.event.HasField("metrics")]


def test_two_data_parallel_ranks_train_the_same_model_as_one_worker(examples_client):
    """Global batch semantics: 2 ranks x 32 rows per step give the weights 1 worker x 64 gives."""
    config = {"epochs": 2, "batch_size": 64, "lr": 0.05, "optimizer": "sgd", "hidden_sizes": [32]}
    single = _start(examples_client, "digits_mlp", config)
    parallel = _start(examples_client, "digits_mlp", config, num_workers=2)

    assert [w.rank for w in parallel.workers] == [0, 1]
    assert parallel.latest_checkpoint.epoch == single.latest_checkpoint.epoch == 2
    want, got = _params(single.latest_checkpoint), _params(parallel.latest_checkpoint)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-4, atol=1e-5, err_msg=key)
    assert parallel.latest_metrics.metrics["accuracy"] == pytest.approx(single.latest_metrics.metrics["accuracy"], abs=0.01)
    assert parallel.latest_metrics.metrics["samples"] == single.latest_metrics.metrics["samples"]


def test_cnn_trains_on_datasets_and_resumes_at_the_next_epoch(examples_client, trainer):
    root = Path(trainer.storage_root)
    train = digits_data.write_digits(root / "datasets", "parquet", split="train")
    validation = digits_data.write_digits(root / "datasets", "npy", split="validation")
    datasets = [
        common_pb2.Dataset(name="train", uri=str(train.relative_to(root))),
        common_pb2.Dataset(name="validation", uri=str(validation.relative_to(root))),
    ]
    config = {"epochs": 2, "batch_size": 32, "lr": 0.01, "channels": [8, 16]}

    first = _start(examples_client, "digits_cnn", {**config, "epochs": 1}, datasets=datasets)
    resumed = _start(examples_client, "digits_cnn", config, datasets=datasets, resume_from=first.latest_checkpoint)

    assert _epochs_reported(examples_client, first) == [1.0]
    assert _epochs_reported(examples_client, resumed) == [2.0]  # epoch 1 is not trained again
    assert resumed.latest_checkpoint.epoch == 2
    metrics = resumed.latest_metrics.metrics
    assert metrics["samples"] == len(digits_data.load_split()["train"][1]) // 32 * 32
    assert metrics["accuracy"] > 0.6, metrics
    logs = examples_client.stub.GetRunLogs(trainer_service_pb2.GetRunLogsRequest(name=resumed.name), timeout=30)
    texts = [line.text for batch in logs for line in batch.lines]
    assert any("epochs 2..2 train=dataset validation=dataset" in t for t in texts), texts


def test_a_stop_ends_both_data_parallel_ranks_on_their_own(examples_client):
    """The ranks agree on the step to stop at, so neither is left waiting in a collective
    until the trainer kills it: both log their exit, and the run ends STOPPED."""
    config = {"epochs": 500, "batch_size": 64, "stop_check_steps": 3}
    run = _start(examples_client, "digits_mlp", config, num_workers=2, wait=False)
    examples_client.wait_for(run.name, lambda r: r.latest_metrics.metrics.get("epoch", 0) >= 1, timeout=180)

    request = trainer_service_pb2.StopRunRequest(
        name=run.name, grace_period=duration_pb2.Duration(seconds=120), reason="test stop"
    )
    examples_client.stub.StopRun(request, timeout=30)
    done = examples_client.wait_done(run.name, timeout=180)

    assert done.state == run_pb2.RUN_STATE_STOPPED, done.state_reason
    assert done.latest_checkpoint.epoch >= 1
    logs = examples_client.stub.GetRunLogs(trainer_service_pb2.GetRunLogsRequest(name=run.name), timeout=30)
    stops = {line.rank: line.text for batch in logs for line in batch.lines if "stops at epoch" in line.text}
    assert sorted(stops) == [0, 1], stops
    assert stops[0].split("stops at")[1] == stops[1].split("stops at")[1]  # the same epoch and step


def test_background_commits_report_every_checkpoint_in_order_with_the_final_weights(examples_client):
    """commit_in_background: the ranks train on while rank 0's commits land; nothing is lost or reordered."""
    config = {"epochs": 3, "batch_size": 64, "hidden_sizes": [32]}
    policy = common_pb2.CheckpointPolicy(commit_in_background=True)
    background = _start(examples_client, "digits_mlp", config, num_workers=2, policy=policy)
    inline = _start(examples_client, "digits_mlp", config, num_workers=2)
    events = examples_client.stub.WatchRun(trainer_service_pb2.WatchRunRequest(name=background.name), timeout=60)
    checkpoints = [r.event.checkpoint.epoch for r in events if r.event.HasField("checkpoint")]
    assert checkpoints == [1, 2, 3]
    assert background.latest_checkpoint.epoch == 3
    assert _epochs_reported(examples_client, background) == [1.0, 2.0, 3.0]
    want, got = _params(inline.latest_checkpoint), _params(background.latest_checkpoint)
    assert want.keys() == got.keys() and all(np.array_equal(want[k], got[k]) for k in want)
