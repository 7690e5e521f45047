"""A built-in model trained for real (scheduler + trainer on the shared Ray head), then exported
from its job: the best checkpoint, the job's builder and config, validation figures, and
predictions of the served static model equal to the dynamic model's."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import numpy as np
import pytest

from paddleray.common.v1 import common_pb2
from paddleray.exporter.v1 import model_pb2
from paddleray.scheduler.v1 import job_pb2, job_service_pb2_grpc
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.services.common.checkpoints import CheckpointStore
from paddleray.services.scheduler.__main__ import registrations as scheduler_registrations
from paddleray.services.scheduler.app import SchedulerApp
from paddleray.services.scheduler.settings import SchedulerSettings
from paddleray.services.trainer.__main__ import registrations as trainer_registrations
from paddleray.services.trainer.examples import digits_data, digits_mlp, loop
from paddleray.services.trainer.settings import TrainerSettings
from paddleray.services.trainer.trainer import Trainer
from support import ServerThread, wait_until
from support.exporter import EXAMPLES, AppThread
from support.scheduler import make_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]
J = job_pb2.JobState
S = model_pb2.ModelVersionState


@pytest.fixture(scope="module")
def real_trainer(ray_cluster, storage_root):
    settings = TrainerSettings(port=0, storage_root=storage_root, entrypoint_allowlist=[EXAMPLES], stop_grace_s=2.0,
                               pool_max_idle_groups=0)
    trainer = Trainer(settings)
    server = ServerThread(settings, trainer_registrations(trainer))
    server.run(trainer.start())
    yield server
    server.run(trainer.shutdown())
    server.stop()


@pytest.fixture(scope="module")
def scheduler_address(real_trainer, redis_server):
    settings = SchedulerSettings(port=0, redis_url=redis_server.url, trainer_address=real_trainer.address,
                                 dispatch_interval_s=0.1)
    scheduler = AppThread(settings, SchedulerApp, scheduler_registrations)
    yield scheduler.address
    scheduler.stop()


@pytest.fixture(scope="module")
def trained_job(scheduler_address) -> job_pb2.Job:
    job = make_job(f"{EXAMPLES}.digits_mlp:train", config={"epochs": 2, "hidden_sizes": [32]})
    job.spec.checkpoint_policy.CopyFrom(common_pb2.CheckpointPolicy(best_metric="val_loss",
                                                                    best_mode=common_pb2.METRIC_MODE_MIN))
    with grpc.insecure_channel(scheduler_address) as channel:
        stub = job_service_pb2_grpc.JobServiceStub(channel)
        created = stub.CreateJob(js.CreateJobRequest(job=job, job_id="digits-train"), timeout=30).job

        def ended():
            current = stub.GetJob(js.GetJobRequest(name=created.name), timeout=10).job
            return current if current.state in (J.JOB_STATE_SUCCEEDED, J.JOB_STATE_FAILED) else None

        done = wait_until(ended, timeout=300, interval=0.5, message="the training job to end")
    assert done.state == J.JOB_STATE_SUCCEEDED, done.state_reason
    return done


def test_a_trained_job_exports_its_best_checkpoint_and_serves_the_dynamic_models_predictions(client, trained_job):
    version = client.export(parent="models/digits", job=trained_job.name, request_id="digits-from-job")
    assert version.state == S.MODEL_VERSION_STATE_EXPORTING and version.source_job == trained_job.name
    done = client.wait_done(version.name)
    assert done.state == S.MODEL_VERSION_STATE_READY, done.state_reason
    # The builder and config default to the job's entrypoint module and config.
    assert done.model_builder == f"{EXAMPLES}.digits_mlp:build_model"
    assert dict(done.model_config)["hidden_sizes"] == [32.0]
    # The best checkpoint by the job's own policy (lowest val_loss), with its metrics.
    checkpoints = CheckpointStore(Path(trained_job.latest_checkpoint.uri).parent).list()
    best = min(checkpoints, key=lambda c: c.metrics["val_loss"])
    assert len(checkpoints) == 2 and done.source_checkpoint.uri == str(best.path)
    assert done.source_checkpoint.metrics["val_loss"] == pytest.approx(best.metrics["val_loss"])
    assert done.source_job_metrics["accuracy"] == trained_job.latest_metrics.metrics["accuracy"]
    (check,) = done.validation.backends
    assert check.passed and check.max_abs_error <= 1e-5 and done.validation.num_samples == 4
    assert [(t.name, list(t.shape)) for t in done.inputs] == [("x", [-1, 64])]
    assert [(t.name, list(t.shape)) for t in done.outputs] == [("fetch_name_0", [-1, 10])]

    # The exported model, through the predictor that serves it, predicts what the trained
    # dynamic model predicts on the real validation rows.
    import paddle
    import paddle.inference as pi

    x, _ = digits_data.load_split()["validation"]
    x = np.ascontiguousarray(x.reshape(-1, 64).astype(np.float32))
    model = digits_mlp.build_model({"hidden_sizes": [32]})
    loop.load_checkpoint(done.source_checkpoint.uri, model)
    model.eval()
    with paddle.no_grad():
        dynamic = model(paddle.to_tensor(x)).numpy()
    paddle_dir = Path(done.artifacts[0].uri)
    config = pi.Config(str(paddle_dir / "inference.json"), str(paddle_dir / "inference.pdiparams"))
    config.disable_mkldnn()
    config.disable_glog_info()
    predictor = pi.create_predictor(config)
    handle = predictor.get_input_handle("x")
    handle.reshape(list(x.shape))
    handle.copy_from_cpu(x)
    predictor.run()
    static = predictor.get_output_handle("fetch_name_0").copy_to_cpu()
    np.testing.assert_allclose(static, dynamic, rtol=1e-5, atol=1e-5)
    assert (static.argmax(axis=1) == dynamic.argmax(axis=1)).all()
    manifest = json.loads((paddle_dir.parent / "manifest.json").read_text())
    assert manifest["version"] == done.name and manifest["predictor_outputs"] == ["fetch_name_0"]


def test_a_job_without_a_checkpoint_or_unknown_is_rejected(client, scheduler_address):
    with pytest.raises(grpc.RpcError) as info:
        client.export(parent="models/digits", job="jobs/never-created")
    assert info.value.code() == grpc.StatusCode.NOT_FOUND and "jobs/never-created" in info.value.details()
