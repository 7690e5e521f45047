"""The reliability suite: each service served in-process over a real channel (real Redis, the
session's Ray head), a few resources that exist, and one recorder of every fuzzed request.

Two sizes: the default (CI) profile sends a few hundred requests per service; the soak
profile (`PADDLERAY_SOAK=1`, or `--hypothesis-profile soak`) at least 10,000 per service.
The recorder writes tests/reliability/results/fuzz.json (not committed; set
PADDLERAY_RELIABILITY_RESULTS_DIR to put it elsewhere), which `make reliability-report` turns
into docs/reliability.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest
import redis
from hypothesis import HealthCheck, settings

from paddleray.common.v1 import common_pb2
from paddleray.exporter.v1 import deployment_pb2, model_pb2
from paddleray.exporter.v1 import exporter_service_pb2 as es
from paddleray.scheduler.v1 import (
    experiment_pb2,
    experiment_service_pb2_grpc,
    job_pb2,
    job_service_pb2,
    job_service_pb2_grpc,
)
from paddleray.scheduler.v1 import experiment_service_pb2 as xs
from paddleray.services.common import states
from paddleray.services.exporter.settings import ExporterSettings
from paddleray.services.scheduler import keys
from paddleray.services.scheduler.__main__ import registrations as scheduler_registrations
from paddleray.services.scheduler.app import SchedulerApp
from paddleray.services.scheduler.settings import SchedulerSettings
from paddleray.services.trainer.__main__ import registrations as trainer_registrations
from paddleray.services.trainer.settings import TrainerSettings
from paddleray.services.trainer.trainer import Trainer
from paddleray.trainer.v1 import trainer_service_pb2 as ts
from reliability.harness import LoopThread, Recorder, Target, all_pages, healthy, soak
from support import ServerThread, free_port, wait_until
from support.exporter import BUILDERS, EXAMPLES, AppThread, exporter_thread, new_model, new_version
from support.fake_trainer import FakeTrainer, start_fake_trainer
from support.scheduler import make_job

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example,
          HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much]
settings.register_profile("ci", deadline=None, database=None, suppress_health_check=_QUIET, print_blob=True)
settings.register_profile("soak", deadline=None, database=None, suppress_health_check=_QUIET, print_blob=True)
if os.environ.get("PADDLERAY_SOAK") == "1":
    settings.load_profile("soak")
elif settings.get_current_profile_name() == "default":
    settings.load_profile("ci")

ALLOWED = "fuzz_allowed_entrypoints"  # allowlisted, never importable: an accepted run fails at once
SEED_CODE = Path(__file__).parent.parent / "integration" / "trainer" / "workers"
SEED_ENTRYPOINTS = "trainer_test_entrypoints"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "reliability" in item.path.parts:
            item.add_marker(pytest.mark.reliability)
            if soak():
                item.add_marker(pytest.mark.timeout(3600))


@pytest.fixture(scope="session")
def recorder():
    record = Recorder(settings.get_current_profile_name())
    yield record
    record.write()


# --- scheduler: JobService, ExperimentService, PackageService over Redis, a fake trainer behind it


@pytest.fixture(scope="module")
def scheduler_target(redis_server, recorder):
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    fake_loop = LoopThread()  # the fake trainer's server runs on a loop of its own
    fake_server, fake_address = fake_loop.run(start_fake_trainer(FakeTrainer(cpus=4, gpus=0)))
    config = SchedulerSettings(port=0, redis_url=redis_server.url, trainer_address=fake_address,
                               dispatch_interval_s=0.05, lease_ttl_s=3, stop_wait_s=2, grace_period_s=0,
                               entrypoint_allowlist=["pkg", ALLOWED])
    app = AppThread(config, SchedulerApp, scheduler_registrations)
    channel = grpc.insecure_channel(app.address)
    jobs = job_service_pb2_grpc.JobServiceStub(channel)
    experiments = experiment_service_pb2_grpc.ExperimentServiceStub(channel)
    seeded = [jobs.CreateJob(job_service_pb2.CreateJobRequest(job=make_job(config={"hang": True})), timeout=10).job,
              jobs.CreateJob(job_service_pb2.CreateJobRequest(job=make_job()), timeout=10).job]
    experiment = experiment_pb2.Experiment(trial_template=make_job(config={"hang": True}), metric="acc", mode=1,
                                           max_concurrent_trials=1)
    experiment.search_space.parameters["lr"].grid.values.add().number_value = 0.1
    created = experiments.CreateExperiment(xs.CreateExperimentRequest(experiment=experiment), timeout=10).experiment

    def fingerprint():
        # Trials come and go as the experiment runs: its own jobs are left out.
        # BASIC leaves the configs out (accepted jobs carry megabytes of them); experiments,
        # which have no such view, are read as their keys.
        def job_page(token):
            request = job_service_pb2.ListJobsRequest(page_size=500, page_token=token,
                                                      view=job_pb2.JOB_VIEW_BASIC)
            page = jobs.ListJobs(request, timeout=10)
            return [j.name for j in page.jobs if not j.experiment], page.next_page_token

        prefix = keys.experiment("")
        return {"jobs": all_pages(job_page),
                "experiments": sorted(k for k in (k.decode() for k in client.scan_iter(f"{prefix}*", count=1000))
                                      if ":" not in k.removeprefix(prefix)),
                "packages": sorted(k.decode() for k in client.scan_iter("*package*"))}

    names = (*[j.name for j in seeded], created.name, "packages/sha256:" + "0" * 64)
    job, exp = seeded[0].name, created.name
    quick = experiment_pb2.Experiment()
    quick.CopyFrom(experiment)
    quick.trial_template.spec.config.Clear()
    bases = {
        "CreateJob": job_service_pb2.CreateJobRequest(job=make_job(config={"steps": 1})),
        "CreateExperiment": xs.CreateExperimentRequest(experiment=quick),
        "ListJobs": job_service_pb2.ListJobsRequest(page_size=10),
        "ListExperiments": xs.ListExperimentsRequest(page_size=10),
        **{rpc: getattr(job_service_pb2, f"{rpc}Request")(name=job)
           for rpc in ("GetJob", "CancelJob", "DeleteJob", "WatchJob", "GetJobLogs")},
        **{rpc: getattr(xs, f"{rpc}Request")(name=exp)
           for rpc in ("GetExperiment", "CancelExperiment", "DeleteExperiment")},
    }
    target = Target("scheduler", channel, names, fingerprint, recorder, keep_going=soak(), bases=bases)
    yield target
    recorder.write()
    assert healthy(channel)
    assert not target.failures(), target.failures()[:5]
    channel.close()
    app.stop()
    fake_loop.run(fake_server.stop(0.2))
    fake_loop.stop()
    client.close()


# --- trainer: TrainerService driving the session's Ray head; nothing it accepts can import


@pytest.fixture(scope="module")
def trainer_target(ray_cluster, tmp_path_factory, recorder):
    from paddleray.trainer.v1 import trainer_service_pb2_grpc

    config = TrainerSettings(port=0, storage_root=tmp_path_factory.mktemp("fuzz-trainer"),
                             entrypoint_allowlist=[ALLOWED, SEED_ENTRYPOINTS], stop_grace_s=1.0,
                             pool_max_idle_groups=0)
    trainer = Trainer(config)
    server = ServerThread(config, trainer_registrations(trainer))
    server.run(trainer.start())
    channel = grpc.insecure_channel(server.address)
    stub = trainer_service_pb2_grpc.TrainerServiceStub(channel)

    # One finished run (with events and logs), so that names of a run that exists are fuzzed too.
    seed = common_pb2.TrainingSpec(entrypoint=f"{SEED_ENTRYPOINTS}:hello", num_workers=1,
                                   resources_per_worker=common_pb2.Resources(num_cpus=1),
                                   runtime_env=common_pb2.RuntimeEnv(env_vars={"PYTHONPATH": str(SEED_CODE)}))
    seed.config.update({"lines": 2})
    run = stub.StartRun(ts.StartRunRequest(spec=seed), timeout=30).run
    wait_until(lambda: stub.GetRun(ts.GetRunRequest(name=run.name), timeout=10).run.state in states.RUN_TERMINAL,
               timeout=120, interval=0.1, message="the seed run to end")

    def fingerprint():
        def page(token):
            response = stub.ListRuns(ts.ListRunsRequest(page_size=500, page_token=token), timeout=10)
            return [r.name for r in response.runs], response.next_page_token

        return {"runs": all_pages(page)}

    # A valid StartRun but for its run_id, the seed run's: it passes every check and is then
    # refused as ALREADY_EXISTS, so mutations reach every rule without starting runs on Ray.
    valid = common_pb2.TrainingSpec(entrypoint=f"{ALLOWED}:main", num_workers=1,
                                    resources_per_worker=common_pb2.Resources(num_cpus=1))
    start = ts.StartRunRequest(spec=valid, run_id=run.name.removeprefix("runs/"))
    start.timeout.FromSeconds(60)
    bases = {"StartRun": start, "ListRuns": ts.ListRunsRequest(page_size=10),
             **{rpc: getattr(ts, f"{rpc}Request")(name=run.name) for rpc in ("GetRun", "StopRun", "WatchRun",
                                                                             "GetRunLogs")}}
    target = Target("trainer", channel, (run.name, run.job or "jobs/x"), fingerprint, recorder, keep_going=soak(),
                    bases=bases, frozen={"StartRun": frozenset({"run_id"})})
    yield target
    recorder.write()
    assert healthy(channel)
    assert not target.failures(), target.failures()[:5]
    channel.close()
    server.run(trainer.shutdown())
    server.stop()


# --- exporter: ExporterService over Redis and the session's Ray head, one model in its registry


@pytest.fixture(scope="module")
def exporter_target(ray_cluster, redis_server, tmp_path_factory, recorder):
    from paddleray.exporter.v1 import exporter_service_pb2_grpc

    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    config = ExporterSettings(
        port=0, redis_url=redis_server.url, ray_address=ray_cluster,
        storage_root=tmp_path_factory.mktemp("fuzz-exporter"), builder_allowlist=[EXAMPLES, BUILDERS],
        scheduler_address="", export_num_cpus=0.5, serving_grpc_port=free_port(), serving_http_port=free_port(),
    )
    thread = exporter_thread(config)
    _, record = thread.run(thread.app.store.create_version(new_model("fuzz-seed"), new_version(), "owner", ""))
    channel = grpc.insecure_channel(thread.address)
    stub = exporter_service_pb2_grpc.ExporterServiceStub(channel)

    def fingerprint():
        def model_page(token):
            response = stub.ListModels(es.ListModelsRequest(page_size=500, page_token=token), timeout=10)
            return [(m.name, m.display_name, dict(m.labels)).__repr__() for m in response.models], \
                response.next_page_token

        def deployment_page(token):
            response = stub.ListDeployments(es.ListDeploymentsRequest(page_size=500, page_token=token), timeout=10)
            return [d.name for d in response.deployments], response.next_page_token

        def version_page(token):
            response = stub.ListModelVersions(
                es.ListModelVersionsRequest(parent="models/fuzz-seed", page_size=500, page_token=token), timeout=10)
            return [v.name for v in response.model_versions], response.next_page_token

        try:
            versions = all_pages(version_page)
        except grpc.RpcError as error:  # the seed model deleted by an accepted DeleteModel
            versions = [error.code().name]
        return {"models": all_pages(model_page), "versions": versions, "deployments": all_pages(deployment_page)}

    names = ("models/fuzz-seed", record.version.name, "deployments/fuzz-seed", "jobs/x")
    model, version = "models/fuzz-seed", record.version.name
    update_model = es.UpdateModelRequest(model=model_pb2.Model(name=model, display_name="seed"))
    update_model.update_mask.paths.append("display_name")
    deployment = deployment_pb2.Deployment(serving_name="fuzz", num_replicas=1,
                                           traffic=[deployment_pb2.TrafficTarget(model_version=version, percent=100)])
    bases = {
        # A checkpoint that does not exist: accepted calls never start an export on Ray.
        "ExportModel": es.ExportModelRequest(parent="models/fuzz-new", checkpoint_uri="/nonexistent/checkpoint",
                                             model_builder=f"{EXAMPLES}.digits_mlp:build_model"),
        "CreateDeployment": es.CreateDeploymentRequest(deployment_id="fuzz", deployment=deployment),
        "UpdateModel": update_model,
        "ListModels": es.ListModelsRequest(page_size=10),
        "ListDeployments": es.ListDeploymentsRequest(page_size=10, model=model),
        "ListModelVersions": es.ListModelVersionsRequest(parent=model, page_size=10),
        **{rpc: getattr(es, f"{rpc}Request")(name=model) for rpc in ("GetModel", "DeleteModel")},
        **{rpc: getattr(es, f"{rpc}Request")(name=version)
           for rpc in ("GetModelVersion", "DeleteModelVersion", "WatchModelVersion")},
    }
    target = Target("exporter", channel, names, fingerprint, recorder, keep_going=soak(), bases=bases)
    yield target
    recorder.write()
    assert healthy(channel)
    assert not target.failures(), target.failures()[:5]
    channel.close()
    thread.stop()
    client.close()
