"""Every TrainerService RPC x every kind of caller, on a real trainer driving the shared Ray head.

The runs acted on are team-a's, started by an admin naming the tenant (as the scheduler does
with its own service credential for a job's run).
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc import aio

from paddleray.services.common.states import RUN_TERMINAL
from paddleray.services.trainer.__main__ import registrations
from paddleray.services.trainer.settings import TrainerSettings
from paddleray.services.trainer.trainer import Trainer
from paddleray.trainer.v1 import trainer_service_pb2 as ts
from paddleray.trainer.v1 import trainer_service_pb2_grpc
from support import ServerThread
from support.auth import ADMIN, CALLERS, MEMBER_A, MEMBER_B, check_matrix, code_of, expect, metadata, write_token_file

from .conftest import ENTRYPOINTS, TrainerClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
C = grpc.StatusCode


@pytest.fixture(scope="module")
def auth_trainer(ray_cluster, tmp_path_factory):
    directory = tmp_path_factory.mktemp("trainer-auth")
    settings = TrainerSettings(
        port=0, storage_root=directory / "storage", entrypoint_allowlist=[ENTRYPOINTS], stop_grace_s=1.0,
        pool_max_idle_groups=0, auth_tokens_file=write_token_file(directory / "tokens.yaml"),
    )
    trainer = Trainer(settings)
    server = ServerThread(settings, registrations(trainer))
    server.run(trainer.start())
    yield server
    server.run(trainer.shutdown())
    server.stop()


def _spec():
    return TrainerClient(None).spec("hello")


async def test_trainer_service_matrix(auth_trainer):
    async with aio.insecure_channel(auth_trainer.address) as channel:
        stub = trainer_service_pb2_grpc.TrainerServiceStub(channel)
        admin = metadata(ADMIN)
        run = (await stub.StartRun(ts.StartRunRequest(spec=_spec(), tenant="team-a"), metadata=admin)).run
        assert run.tenant == "team-a"
        while (await stub.GetRun(ts.GetRunRequest(name=run.name), metadata=admin)).run.state not in RUN_TERMINAL:
            await asyncio.sleep(0.1)

        async def start(md):
            return await stub.StartRun(ts.StartRunRequest(spec=_spec()), metadata=md)

        async def start_for_team_a(md):
            return await stub.StartRun(ts.StartRunRequest(spec=_spec(), tenant="team-a"), metadata=md)

        table = {
            "StartRun": (start, expect(read_only_a=C.PERMISSION_DENIED, member_a=C.OK, member_b=C.OK, admin=C.OK)),
            "StartRun(tenant=team-a)": (start_for_team_a, expect(
                read_only_a=C.PERMISSION_DENIED, member_a=C.OK, member_b=C.PERMISSION_DENIED, admin=C.OK)),
            "GetRun": (lambda md: stub.GetRun(ts.GetRunRequest(name=run.name), metadata=md),
                       expect(read_only_a=C.OK, member_a=C.OK, member_b=C.NOT_FOUND, admin=C.OK)),
            "ListRuns": (lambda md: stub.ListRuns(ts.ListRunsRequest(), metadata=md),
                         expect(read_only_a=C.OK, member_a=C.OK, member_b=C.OK, admin=C.OK)),
            "StopRun": (lambda md: stub.StopRun(ts.StopRunRequest(name=run.name), metadata=md),
                        expect(read_only_a=C.PERMISSION_DENIED, member_a=C.OK, member_b=C.NOT_FOUND, admin=C.OK)),
            "WatchRun": (lambda md: stub.WatchRun(ts.WatchRunRequest(name=run.name), metadata=md),
                         expect(read_only_a=C.OK, member_a=C.OK, member_b=C.NOT_FOUND, admin=C.OK)),
            "GetRunLogs": (lambda md: stub.GetRunLogs(ts.GetRunLogsRequest(name=run.name), metadata=md),
                           expect(read_only_a=C.OK, member_a=C.OK, member_b=C.NOT_FOUND, admin=C.OK)),
            "GetClusterResources": (lambda md: stub.GetClusterResources(ts.GetClusterResourcesRequest(), metadata=md),
                                    expect(read_only_a=C.OK, member_a=C.OK, member_b=C.OK, admin=C.OK)),
        }
        got = {rpc: {caller: await code_of(lambda c=call, t=token: c(metadata(t))) for caller, token in CALLERS.items()}
               for rpc, (call, _) in table.items()}
        assert check_matrix("trainer", "TrainerService", {rpc: row for rpc, (_, row) in table.items()}, got) == []

        async def tenants(token, tenant=""):
            response = await stub.ListRuns(ts.ListRunsRequest(tenant=tenant), metadata=metadata(token))
            return {r.tenant for r in response.runs}

        assert await tenants(MEMBER_A) == {"team-a"}
        assert await tenants(MEMBER_B) == {"team-b"}
        assert await tenants(MEMBER_B, "team-a") == set()
        assert await tenants(ADMIN) == {"team-a", "team-b", "ops"}
        for listed in (await stub.ListRuns(ts.ListRunsRequest(), metadata=admin)).runs:
            await stub.StopRun(ts.StopRunRequest(name=listed.name), metadata=admin)
