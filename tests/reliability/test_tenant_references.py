"""Issue 21 point 2: a reference to another tenant's resource is refused as GetJob refuses it.

A scheduler over real gRPC and Redis with a token file (team-a, team-b, an admin), a storage
root holding team-a's checkpoint and exported version, and team-a's job with a checkpoint.
Team-b names them in init_from (a job, a sweep's template), in checkpoint_uri, as a dataset:
each answer is the one for a resource that does not exist, and says nothing of the file
system; resolved_uri is shown to admins only. The trainer's StartRun applies the same rules to
a member calling it directly. Every cell is recorded for the reliability report.
"""

from __future__ import annotations

import contextlib

import grpc
import pytest
from grpc import aio

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import experiment_pb2, experiment_service_pb2_grpc, job_pb2, job_service_pb2_grpc
from paddleray.scheduler.v1 import experiment_service_pb2 as xs
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.services.common.server import start_server, stop_server
from paddleray.services.localstack.ports import free_port
from paddleray.services.scheduler.__main__ import registrations
from paddleray.services.scheduler.app import SchedulerApp
from paddleray.services.scheduler.settings import SchedulerSettings
from paddleray.services.trainer.__main__ import registrations as trainer_registrations
from paddleray.services.trainer.settings import TrainerSettings
from paddleray.services.trainer.trainer import Trainer
from paddleray.trainer.v1 import trainer_service_pb2 as ts
from paddleray.trainer.v1 import trainer_service_pb2_grpc
from support import ServerThread
from support.auth import ADMIN, CALLERS, MEMBER_A, MEMBER_B, check_matrix, code_of, expect, metadata, write_token_file
from support.manifests import write_exported
from support.scheduler import make_job

pytestmark = [pytest.mark.timeout(120)]
C = grpc.StatusCode


@contextlib.asynccontextmanager
async def scheduler(redis_url, tmp_path, storage):
    config = SchedulerSettings(
        redis_url=redis_url, trainer_address=f"127.0.0.1:{free_port()}", storage_root=storage, dispatch=False,
        auth_tokens_file=write_token_file(tmp_path / "tokens.yaml"), entrypoint_allowlist=["pkg"],
    )
    app = SchedulerApp(config)
    server = await start_server(config, registrations(app))
    await app.start()
    channel = aio.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        yield app, job_service_pb2_grpc.JobServiceStub(channel), experiment_service_pb2_grpc.ExperimentServiceStub(channel)
    finally:
        await channel.close()
        await stop_server(server, 0.5)
        await app.stop()


def _checkpoint(directory) -> common_pb2.Checkpoint:
    directory.mkdir(parents=True)
    (directory / "model.pdparams").write_bytes(b"team-a's weights")
    return common_pb2.Checkpoint(uri=str(directory), step=1, metrics={"loss": 0.1})


def _exported(storage, model: str, tenant: str | None) -> None:
    """A version as the exporter writes it (manifest.json last, naming the tenant)."""
    version = storage / "models" / model / "versions" / "1"
    (version / "paddle").mkdir(parents=True)
    write_exported(version, model, 1, tenant or "")


def _fine_tune(**init_from) -> job_pb2.Job:
    job = make_job()
    job.spec.init_from.CopyFrom(common_pb2.InitFrom(**init_from))
    return job


async def _refusal(call) -> tuple[grpc.StatusCode, str]:
    try:
        await call
    except aio.AioRpcError as exc:
        return exc.code(), exc.details()
    return C.OK, ""


async def test_references_to_another_tenants_resources_are_not_found(redis_url, tmp_path):
    storage = tmp_path / "storage"
    checkpoint = _checkpoint(storage / "runs" / "run-a" / "checkpoints" / "ckpt-1")
    _exported(storage, "a-model", "team-a")
    _exported(storage, "legacy-model", None)  # exported before versions named their tenant: default's
    async with scheduler(redis_url, tmp_path, storage) as (app, jobs, experiments):
        a = metadata(MEMBER_A)
        source = (await jobs.CreateJob(js.CreateJobRequest(job=make_job(), job_id="a-baseline"), metadata=a)).job
        record = await app.manager.record(source.name)
        with_checkpoint = job_pb2.Job()
        with_checkpoint.CopyFrom(record.job)
        with_checkpoint.latest_checkpoint.CopyFrom(checkpoint)
        assert await app.manager.update(record, with_checkpoint, [job_pb2.JobEvent(checkpoint=checkpoint)])

        def create(job):
            return lambda md: jobs.CreateJob(js.CreateJobRequest(job=job), metadata=md)

        def sweep(job):
            experiment = experiment_pb2.Experiment(trial_template=job, metric="loss", mode=common_pb2.METRIC_MODE_MIN)
            experiment.search_space.parameters["lr"].grid.values.add().number_value = 0.1
            return lambda md: experiments.CreateExperiment(xs.CreateExperimentRequest(experiment=experiment), metadata=md)

        dataset = make_job()
        dataset.spec.datasets.add(name="train", uri="runs/run-a/checkpoints/ckpt-1/model.pdparams",
                                  format=common_pb2.DATASET_FORMAT_NPY)
        hidden, denied = C.NOT_FOUND, C.PERMISSION_DENIED
        table = {
            "CreateJob(init_from.job of team-a)": (create(_fine_tune(job=source.name)), expect(
                read_only_a=denied, member_a=C.OK, member_b=hidden, admin=C.OK)),
            "CreateJob(init_from.model_version of team-a)": (
                create(_fine_tune(model_version="models/a-model/versions/1")),
                expect(read_only_a=denied, member_a=C.OK, member_b=hidden, admin=C.OK)),
            "CreateJob(init_from.checkpoint_uri of team-a)": (create(_fine_tune(checkpoint_uri=checkpoint.uri)), expect(
                read_only_a=denied, member_a=denied, member_b=denied, admin=C.OK)),
            "CreateJob(init_from.checkpoint_uri /etc)": (create(_fine_tune(checkpoint_uri="/etc")), expect(
                read_only_a=denied, member_a=denied, member_b=denied, admin=C.INVALID_ARGUMENT)),
            "CreateJob(datasets[].uri in runs/)": (create(dataset), expect(
                read_only_a=denied, member_a=denied, member_b=denied, admin=C.OK)),
            "CreateExperiment(template init_from.job of team-a)": (sweep(_fine_tune(job=source.name)), expect(
                read_only_a=denied, member_a=C.OK, member_b=hidden, admin=C.OK)),
        }
        got = {rpc: {caller: await code_of(lambda c=call, t=token: c(metadata(t))) for caller, token in CALLERS.items()}
               for rpc, (call, _) in table.items()}
        assert check_matrix("scheduler", "JobService references", {r: row for r, (_, row) in table.items()}, got) == []

        # Another tenant's job or version is answered in the words of one that does not exist.
        b = metadata(MEMBER_B)
        for present, absent in [(dict(job=source.name), dict(job="jobs/no-such-job")),
                                (dict(model_version="models/a-model/versions/1"),
                                 dict(model_version="models/no-model/versions/1"))]:
            other = await _refusal(jobs.CreateJob(js.CreateJobRequest(job=_fine_tune(**present)), metadata=b))
            missing = await _refusal(jobs.CreateJob(js.CreateJobRequest(job=_fine_tune(**absent)), metadata=b))
            name = next(iter(present.values()))
            assert other[0] == missing[0] == C.NOT_FOUND
            assert other[1].replace(name, "X") == missing[1].replace(next(iter(absent.values())), "X")
        # No file-system oracle: a directory that exists and one that does not get one answer.
        answers = {await _refusal(jobs.CreateJob(js.CreateJobRequest(job=_fine_tune(checkpoint_uri=uri)), metadata=b))
                   for uri in (checkpoint.uri, "/etc", str(tmp_path / "nothing-here"))}
        assert len(answers) == 1 and next(iter(answers))[0] == C.PERMISSION_DENIED, answers
        # A version without a tenant in its manifest is the default tenant's, not everyone's.
        legacy = _fine_tune(model_version="models/legacy-model/versions/1")
        assert (await _refusal(jobs.CreateJob(js.CreateJobRequest(job=legacy), metadata=b)))[0] == C.NOT_FOUND

        # resolved_uri: a path in the shared storage root, shown to admins only.
        mine = (await jobs.CreateJob(js.CreateJobRequest(job=_fine_tune(job=source.name)), metadata=a)).job
        assert mine.spec.init_from.job == source.name and not mine.spec.init_from.resolved_uri
        assert not (await jobs.GetJob(js.GetJobRequest(name=mine.name), metadata=a)).job.spec.init_from.resolved_uri
        listed = (await jobs.ListJobs(js.ListJobsRequest(page_size=100), metadata=a)).jobs
        assert listed and not any(j.spec.init_from.resolved_uri for j in listed)
        admin_view = (await jobs.GetJob(js.GetJobRequest(name=mine.name), metadata=metadata(ADMIN))).job
        assert admin_view.spec.init_from.resolved_uri == checkpoint.uri


@pytest.fixture
def trainer_without_ray(tmp_path):
    """A trainer whose Ray address answers nothing: StartRun's reference checks come first."""
    settings = TrainerSettings(port=0, storage_root=tmp_path / "storage", ray_address=f"127.0.0.1:{free_port()}",
                               auth_tokens_file=write_token_file(tmp_path / "tokens.yaml"))
    trainer = Trainer(settings)
    server = ServerThread(settings, trainer_registrations(trainer))
    yield server, tmp_path / "storage"
    server.stop()


async def test_a_member_starting_a_run_itself_names_no_other_tenants_weights(trainer_without_ray):
    server, storage = trainer_without_ray
    checkpoint = _checkpoint(storage / "runs" / "run-a" / "checkpoints" / "ckpt-1")
    _exported(storage, "a-model", "team-a")

    def spec(**init_from) -> common_pb2.TrainingSpec:
        value = common_pb2.TrainingSpec(entrypoint="pkg.train:main", num_workers=1)
        value.init_from.CopyFrom(common_pb2.InitFrom(**init_from))
        return value

    async with aio.insecure_channel(server.address) as channel:
        stub = trainer_service_pb2_grpc.TrainerServiceStub(channel)
        cases = [
            (ts.StartRunRequest(spec=spec(resolved_uri=checkpoint.uri)), C.PERMISSION_DENIED),
            (ts.StartRunRequest(spec=spec(checkpoint_uri="/etc")), C.PERMISSION_DENIED),
            (ts.StartRunRequest(spec=spec(model_version="models/a-model/versions/1")), C.NOT_FOUND),
            (ts.StartRunRequest(spec=spec(), resume_from=checkpoint), C.PERMISSION_DENIED),
        ]
        for request, code in cases:
            refused = await _refusal(stub.StartRun(request, metadata=metadata(MEMBER_B)))
            assert refused[0] == code, (request, refused)
        # The same model version passes its check for its own tenant (then waits for Ray).
        own = await _refusal(stub.StartRun(cases[2][0], metadata=metadata(MEMBER_A)))
        assert own[0] == C.UNAVAILABLE, own
