"""Every ExporterService RPC x every kind of caller, over real gRPC and Redis, with a real
scheduler for exports from a job.

Callers: no token, a token no one holds, read-only of team-a, member of team-a, member of
team-b, admin. The models, versions, deployments and jobs acted on are team-a's; another
tenant's answers NOT_FOUND as if absent, read-only callers change nothing, admins reach all.

No Ray: the exporter's managers are wired without a cluster (nothing here needs one: every
check runs before the export task or the reconciler would). Exports that pass the checks run
a stand-in task that ends them FAILED; the rows that export from a job (which has no
checkpoint) answer FAILED_PRECONDITION to an authorized caller, which proves they got past the
tenant checks, since another tenant's job is NOT_FOUND before that.
"""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path

import grpc
import pytest
import redis.asyncio as aioredis
from google.protobuf import field_mask_pb2
from grpc import aio

from paddleray.exporter.v1 import deployment_pb2, exporter_service_pb2, exporter_service_pb2_grpc, model_pb2
from paddleray.exporter.v1 import exporter_service_pb2 as es
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.scheduler.v1 import job_service_pb2_grpc
from paddleray.services.common.checkpoints import CheckpointStore
from paddleray.services.common.server import ServiceRegistration, start_server, stop_server
from paddleray.services.exporter.deploy.deployments import DeploymentManager
from paddleray.services.exporter.export.exports import ExportManager
from paddleray.services.exporter.export.sources import SchedulerJobs
from paddleray.services.exporter.export.task.export_records import Failed
from paddleray.services.exporter.registry.models import ModelRegistry
from paddleray.services.exporter.servicer import ExporterServicer
from paddleray.services.exporter.settings import ExporterSettings, SchedulerPeer
from paddleray.services.exporter.store import keys
from paddleray.services.exporter.store.deployment_store import DeploymentStore
from paddleray.services.exporter.store.registry_store import RegistryStore
from paddleray.services.localstack.ports import free_port
from paddleray.services.scheduler.__main__ import registrations as scheduler_registrations
from paddleray.services.scheduler.app import SchedulerApp
from paddleray.services.scheduler.settings import SchedulerSettings
from support.auth import (
    ADMIN,
    CALLERS,
    MEMBER_A,
    MEMBER_B,
    READER_A,
    check_matrix,
    code_of,
    expect,
    metadata,
    write_token_file,
)
from support.exporter import EXAMPLES, ready_version
from support.scheduler import make_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
C = grpc.StatusCode
DEFAULT_MEMBER = "member-of-default-00000001"


class NoCluster:
    """Stands in for the export task on the cluster: ends every export at once."""

    async def run(self, request, runtime_env):
        yield Failed("no cluster in this test")


@contextlib.asynccontextmanager
async def services(redis_url: str, tmp_path: Path):
    """A scheduler (jobs) and an exporter (without Ray) with the same token file; yields
    (exporter stub, job stub, the registry store, the storage root)."""
    tokens = write_token_file(tmp_path / "tokens.yaml", {DEFAULT_MEMBER: {"tenant": "default", "role": "member"}})
    scheduler_settings = SchedulerSettings(redis_url=redis_url, trainer_address=f"127.0.0.1:{free_port()}",
                                           auth_tokens_file=tokens, dispatch=False, entrypoint_allowlist=["pkg"])
    scheduler_app = SchedulerApp(scheduler_settings)
    scheduler_server = await start_server(scheduler_settings, scheduler_registrations(scheduler_app))
    await scheduler_app.start()
    storage_root = tmp_path / "storage"
    settings = ExporterSettings(port=0, redis_url=redis_url, storage_root=storage_root, auth_tokens_file=tokens)
    client = aioredis.Redis.from_url(redis_url)
    store = RegistryStore(client)
    # The exporter reads jobs with its own admin credential and checks the job's tenant itself.
    jobs = SchedulerJobs(SchedulerPeer(address=f"127.0.0.1:{scheduler_server.port}", auth_token=ADMIN))
    exports = ExportManager(store, jobs, NoCluster(), storage_root, [EXAMPLES], owner="matrix")
    servicer = ExporterServicer(exports, ModelRegistry(store, storage_root),
                                DeploymentManager(DeploymentStore(client), store, "127.0.0.1:9000"))
    server = await start_server(settings, [ServiceRegistration(
        exporter_service_pb2.DESCRIPTOR.services_by_name["ExporterService"].full_name, servicer,
        exporter_service_pb2_grpc.add_ExporterServiceServicer_to_server)])
    exporter_channel = aio.insecure_channel(f"127.0.0.1:{server.port}")
    scheduler_channel = aio.insecure_channel(f"127.0.0.1:{scheduler_server.port}")
    try:
        yield (exporter_service_pb2_grpc.ExporterServiceStub(exporter_channel),
               job_service_pb2_grpc.JobServiceStub(scheduler_channel), store, storage_root)
    finally:
        await exporter_channel.close()
        await scheduler_channel.close()
        await stop_server(server, 0.5)
        await exports.shutdown()
        await jobs.close()
        await client.aclose()
        await stop_server(scheduler_server, 0.5)
        await scheduler_app.stop()


def _serving(model_version: str, serving_name: str = "") -> deployment_pb2.Deployment:
    deployment = deployment_pb2.Deployment(serving_name=serving_name)
    deployment.traffic.add(model_version=model_version, percent=100)
    return deployment


def _checkpoint(storage_root: Path) -> str:
    staged = storage_root / "staged"
    staged.mkdir(parents=True)
    (staged / "model.pdparams").write_bytes(b"weights")
    return str(CheckpointStore(storage_root / "checkpoints" / "matrix").commit(staged, step=1, epoch=1, metrics={}).path)


async def test_exporter_service_matrix(redis_url, tmp_path):
    async with services(redis_url, tmp_path) as (stub, jobs, store, storage_root):
        fresh = (f"m{i}" for i in itertools.count())
        a_version = f"models/a-model/versions/{await ready_version(store, storage_root, 'a-model', tenant='team-a')}"
        b_version = f"models/b-model/versions/{await ready_version(store, storage_root, 'b-model', tenant='team-b')}"
        a_job = (await jobs.CreateJob(js.CreateJobRequest(job=make_job()), metadata=metadata(MEMBER_A))).job.name
        b_job = (await jobs.CreateJob(js.CreateJobRequest(job=make_job()), metadata=metadata(MEMBER_B))).job.name
        a_deployment = (await stub.CreateDeployment(es.CreateDeploymentRequest(
            deployment_id="a-serving", deployment=_serving(a_version)), metadata=metadata(MEMBER_A))).deployment
        assert a_deployment.tenant == "team-a"
        checkpoint = _checkpoint(storage_root)

        async def team_a_version() -> str:
            model = next(fresh)
            return f"models/{model}/versions/{await ready_version(store, storage_root, model, tenant='team-a')}"

        async def team_a_deployment() -> str:
            name = next(fresh)
            created = await stub.CreateDeployment(es.CreateDeploymentRequest(
                deployment_id=name, deployment=_serving(a_version, name)), metadata=metadata(MEMBER_A))
            return created.deployment.name

        def export(md, **request):
            return stub.ExportModel(es.ExportModelRequest(**request), metadata=md)

        async def delete_model(md):
            name = (await team_a_version()).rsplit("/versions/", 1)[0]
            return await stub.DeleteModel(es.DeleteModelRequest(name=name), metadata=md)

        async def delete_version(md):
            return await stub.DeleteModelVersion(es.DeleteModelVersionRequest(name=await team_a_version()), metadata=md)

        async def create_deployment(md):
            name = next(fresh)
            return await stub.CreateDeployment(es.CreateDeploymentRequest(
                deployment_id=name, deployment=_serving(a_version, name)), metadata=md)

        async def update_deployment(md):
            change = _serving(a_version)
            change.name, change.num_replicas = a_deployment.name, 2
            return await stub.UpdateDeployment(es.UpdateDeploymentRequest(
                deployment=change, update_mask=field_mask_pb2.FieldMask(paths=["num_replicas"])), metadata=md)

        async def delete_deployment(md):
            return await stub.DeleteDeployment(es.DeleteDeploymentRequest(name=await team_a_deployment()), metadata=md)

        async def update_model(md):
            model = model_pb2.Model(name="models/a-model", display_name="renamed")
            return await stub.UpdateModel(es.UpdateModelRequest(
                model=model, update_mask=field_mask_pb2.FieldMask(paths=["display_name"])), metadata=md)

        hidden, denied, no_checkpoint = C.NOT_FOUND, C.PERMISSION_DENIED, C.FAILED_PRECONDITION
        reads = expect(read_only_a=C.OK, member_a=C.OK, member_b=hidden, admin=C.OK)
        writes = expect(read_only_a=denied, member_a=C.OK, member_b=hidden, admin=C.OK)
        table = {
            # A checkpoint carries no tenant: only admins export one.
            "ExportModel(checkpoint_uri)": (
                lambda md: export(md, parent=f"models/{next(fresh)}", checkpoint_uri=checkpoint,
                                  model_builder=f"{EXAMPLES}.digits_mlp:build_model"),
                expect(read_only_a=denied, member_a=denied, member_b=denied, admin=C.OK)),
            # Refused before the path is looked at: no file-system oracle (issue 21, point 2).
            "ExportModel(checkpoint_uri that does not exist)": (
                lambda md: export(md, parent=f"models/{next(fresh)}", checkpoint_uri=checkpoint + "-nothing-here",
                                  model_builder=f"{EXAMPLES}.digits_mlp:build_model"),
                expect(read_only_a=denied, member_a=denied, member_b=denied, admin=C.NOT_FOUND)),
            "ExportModel(job of team-a)": (
                lambda md: export(md, parent=f"models/{next(fresh)}", job=a_job),
                expect(read_only_a=denied, member_a=no_checkpoint, member_b=hidden, admin=no_checkpoint)),
            "ExportModel(into team-a's model)": (
                lambda md: export(md, parent="models/a-model", job=a_job),
                expect(read_only_a=denied, member_a=no_checkpoint, member_b=hidden, admin=no_checkpoint)),
            "ExportModel(job of team-b into team-a's model)": (
                lambda md: export(md, parent="models/a-model", job=b_job),
                expect(read_only_a=denied, member_a=hidden, member_b=hidden, admin=no_checkpoint)),
            "ExportModel(tenant=team-a)": (
                lambda md: export(md, parent=f"models/{next(fresh)}", job=a_job, tenant="team-a"),
                expect(read_only_a=denied, member_a=no_checkpoint, member_b=denied, admin=no_checkpoint)),
            "WatchModelVersion": (lambda md: stub.WatchModelVersion(es.WatchModelVersionRequest(name=a_version),
                                                                    metadata=md), reads),
            "GetModel": (lambda md: stub.GetModel(es.GetModelRequest(name="models/a-model"), metadata=md), reads),
            "ListModels": (lambda md: stub.ListModels(es.ListModelsRequest(), metadata=md),
                           expect(read_only_a=C.OK, member_a=C.OK, member_b=C.OK, admin=C.OK)),
            "UpdateModel": (update_model, writes),
            "DeleteModel": (delete_model, writes),
            "GetModelVersion": (lambda md: stub.GetModelVersion(es.GetModelVersionRequest(name=a_version), metadata=md),
                                reads),
            "ListModelVersions": (lambda md: stub.ListModelVersions(es.ListModelVersionsRequest(parent="models/a-model"),
                                                                    metadata=md), reads),
            "DeleteModelVersion": (delete_version, writes),
            "CreateDeployment": (create_deployment, writes),
            # team-b's own version under a serving name team-a holds: taken, for everyone.
            "CreateDeployment(serving name of team-a)": (
                lambda md: stub.CreateDeployment(es.CreateDeploymentRequest(
                    deployment_id=next(fresh), deployment=_serving(b_version, "a-serving")), metadata=md),
                expect(read_only_a=denied, member_a=hidden, member_b=C.ALREADY_EXISTS, admin=C.ALREADY_EXISTS)),
            "GetDeployment": (lambda md: stub.GetDeployment(es.GetDeploymentRequest(name=a_deployment.name), metadata=md),
                              reads),
            "ListDeployments": (lambda md: stub.ListDeployments(es.ListDeploymentsRequest(), metadata=md),
                                expect(read_only_a=C.OK, member_a=C.OK, member_b=C.OK, admin=C.OK)),
            "UpdateDeployment": (update_deployment, writes),
            "DeleteDeployment": (delete_deployment, writes),
        }
        got = {rpc: {caller: await code_of(lambda c=call, t=token: c(metadata(t))) for caller, token in CALLERS.items()}
               for rpc, (call, _) in table.items()}
        assert check_matrix("exporter", "ExporterService", {rpc: row for rpc, (_, row) in table.items()}, got) == []

        # What each caller sees: its tenant's models and deployments only.
        async def model_tenants(token, tenant=""):
            response = await stub.ListModels(es.ListModelsRequest(tenant=tenant, page_size=1000), metadata=metadata(token))
            return {m.tenant for m in response.models}

        async def deployment_tenants(token, tenant=""):
            response = await stub.ListDeployments(es.ListDeploymentsRequest(tenant=tenant), metadata=metadata(token))
            return {d.tenant for d in response.deployments}

        assert await model_tenants(MEMBER_A) == await model_tenants(READER_A) == {"team-a"}
        assert await model_tenants(MEMBER_B) == {"team-b"}
        assert await model_tenants(MEMBER_B, "team-a") == set()
        assert await model_tenants(ADMIN) == {"team-a", "team-b", "ops"}  # ops: the admin's checkpoint exports
        assert await model_tenants(ADMIN, "team-b") == {"team-b"}
        assert await deployment_tenants(MEMBER_A) == {"team-a"}
        assert await deployment_tenants(MEMBER_B) == set()
        assert await deployment_tenants(ADMIN, "team-a") == {"team-a"}
        # An admin exporting into team-a's model without naming a tenant adds a team-a version.
        versions = await stub.ListModelVersions(es.ListModelVersionsRequest(parent="models/a-model"),
                                                metadata=metadata(MEMBER_A))
        assert {v.tenant for v in versions.model_versions} == {"team-a"}


async def test_what_another_tenant_is_told(redis_url, tmp_path):
    async with services(redis_url, tmp_path) as (stub, jobs, store, storage_root):
        a_version = f"models/a-model/versions/{await ready_version(store, storage_root, 'a-model', tenant='team-a')}"
        b_version = f"models/b-model/versions/{await ready_version(store, storage_root, 'b-model', tenant='team-b')}"
        await stub.CreateDeployment(es.CreateDeploymentRequest(deployment_id="a-serving", request_id="deploy-1",
                                                               deployment=_serving(a_version, "shared")),
                                    metadata=metadata(MEMBER_A))
        a_job = (await jobs.CreateJob(js.CreateJobRequest(job=make_job()), metadata=metadata(MEMBER_A))).job.name

        async def error(call) -> grpc.aio.AioRpcError:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await call
            return raised.value

        # As if absent: the same words as for a model, version, deployment or job that does not exist.
        for name, missing in (("models/a-model", "models/nothing"), (a_version, "models/nothing/versions/1")):
            call = stub.GetModel if "/versions/" not in name else stub.GetModelVersion
            request = es.GetModelRequest if call is stub.GetModel else es.GetModelVersionRequest
            hidden = await error(call(request(name=name), metadata=metadata(MEMBER_B)))
            absent = await error(call(request(name=missing), metadata=metadata(MEMBER_B)))
            assert hidden.details().replace(name, "X") == absent.details().replace(missing, "X")
        hidden_job = await error(stub.ExportModel(es.ExportModelRequest(parent="models/b-new", job=a_job),
                                                  metadata=metadata(MEMBER_B)))
        assert hidden_job.code() == C.NOT_FOUND and hidden_job.details() == f"job: {a_job} does not exist"
        # A serving name another tenant holds is taken, without naming the deployment holding it.
        taken = await error(stub.CreateDeployment(es.CreateDeploymentRequest(
            deployment_id="b-serving", deployment=_serving(b_version, "shared")), metadata=metadata(MEMBER_B)))
        assert taken.code() == C.ALREADY_EXISTS and "a-serving" not in taken.details()
        # A request_id another tenant used: taken, nothing of the first deployment shown.
        reused = await error(stub.CreateDeployment(es.CreateDeploymentRequest(
            deployment_id="b-serving", request_id="deploy-1", deployment=_serving(b_version, "b-name")),
            metadata=metadata(MEMBER_B)))
        assert reused.code() == C.ALREADY_EXISTS and "a-serving" not in reused.details()
        first = (await stub.ExportModel(es.ExportModelRequest(parent="models/a-new", request_id="export-1",
                                                              checkpoint_uri=_checkpoint(storage_root),
                                                              model_builder=f"{EXAMPLES}.digits_mlp:build_model",
                                                              tenant="team-a"),
                                        metadata=metadata(ADMIN))).model_version
        assert first.tenant == "team-a"
        reused = await error(stub.ExportModel(es.ExportModelRequest(parent="models/b-new", job=a_job,
                                                                    request_id="export-1"),
                                              metadata=metadata(MEMBER_B)))
        assert reused.code() == C.ALREADY_EXISTS and "a-new" not in reused.details()
        # An admin may name a tenant for a new model, not move an existing one to another.
        moved = await error(stub.ExportModel(es.ExportModelRequest(parent="models/a-model", job=a_job, tenant="team-b"),
                                             metadata=metadata(ADMIN)))
        assert moved.code() == C.INVALID_ARGUMENT and moved.details().startswith("tenant")
        watched = [r.model_version async for r in stub.WatchModelVersion(
            es.WatchModelVersionRequest(name=first.name), metadata=metadata(MEMBER_A))]
        assert watched and {v.tenant for v in watched} == {"team-a"}
        # Records written before tenants existed are the default tenant's.
        raw = aioredis.Redis.from_url(redis_url)
        try:
            await raw.hdel(keys.model("b-model"), "tenant")
        finally:
            await raw.aclose()
        seen = await stub.GetModel(es.GetModelRequest(name="models/b-model"), metadata=metadata(DEFAULT_MEMBER))
        assert seen.model.tenant == "default"
        assert (await code_of(lambda: stub.GetModel(es.GetModelRequest(name="models/b-model"),
                                                    metadata=metadata(MEMBER_B)))) == C.NOT_FOUND
