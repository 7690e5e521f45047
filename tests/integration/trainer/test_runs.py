"""Runs over gRPC on the shared Ray head: lifecycle, events, logs, errors, allowlist, warm pool."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from paddleray.common.v1 import common_pb2
from paddleray.services.trainer import metrics
from paddleray.services.trainer.__main__ import registrations
from paddleray.services.trainer.trainer import Trainer
from paddleray.trainer.v1 import run_pb2, trainer_service_pb2, trainer_service_pb2_grpc
from support import ServerThread

pytestmark = pytest.mark.integration


def _states(events):
    return [run_pb2.RunState.Name(e.state_change.to_state) for e in events if e.HasField("state_change")]


def test_run_succeeds_and_streams_numbered_events(client):
    succeeded = metrics.RUNS_BY_STATE.labels(state="SUCCEEDED")._value.get()
    run = client.start("hello", {"lines": 2})
    assert run.state == run_pb2.RUN_STATE_PENDING
    events = [r.event for r in client.stub.WatchRun(trainer_service_pb2.WatchRunRequest(name=run.name), timeout=120)]
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert _states(events) == [
        "RUN_STATE_PENDING", "RUN_STATE_STARTING", "RUN_STATE_RUNNING", "RUN_STATE_SUCCEEDED",
    ]
    reports = [e.metrics for e in events if e.HasField("metrics")]
    assert reports[0].step == 1 and reports[0].metrics["value"] == 1.0
    done = client.stub.GetRun(trainer_service_pb2.GetRunRequest(name=run.name)).run
    assert done.state == run_pb2.RUN_STATE_SUCCEEDED
    assert done.latest_metrics.metrics["value"] == 1.0
    assert done.start_time.seconds and done.end_time.seconds
    assert metrics.RUNS_BY_STATE.labels(state="SUCCEEDED")._value.get() == succeeded + 1
    assert metrics.SAMPLES_PER_SECOND.collect()[0].samples == [], "a finished run's throughput is removed"
    # A reader that reconnects after sequence 2 gets exactly the rest.
    rest = [r.event for r in client.stub.WatchRun(trainer_service_pb2.WatchRunRequest(name=run.name, after_sequence=2))]
    assert [e.sequence for e in rest] == list(range(3, len(events) + 1))


def test_logs_are_captured_per_rank_and_streamed(client):
    run = client.start("hello", {"lines": 3}, num_workers=2)
    client.wait_done(run.name)
    batches = client.stub.GetRunLogs(trainer_service_pb2.GetRunLogsRequest(name=run.name), timeout=30)
    lines = [line for batch in batches for line in batch.lines]
    texts = {(line.rank, line.stream, line.text) for line in lines}
    for rank in (0, 1):
        assert (rank, common_pb2.LOG_STREAM_STDOUT, f"hello from rank {rank} of 2") in texts
        assert (rank, common_pb2.LOG_STREAM_STDERR, f"warning on rank {rank}") in texts
    only_one = client.stub.GetRunLogs(trainer_service_pb2.GetRunLogsRequest(name=run.name, rank=1, tail_lines=2))
    tail = [line for batch in only_one for line in batch.lines]
    assert {line.rank for line in tail} == {1}
    # The newest two lines of rank 1 (stdout and stderr are captured by separate readers, so
    # their relative order is only as good as the capture times).
    assert len(tail) == 2 and "line 2 rank 1" in [line.text for line in tail]


def test_follow_streams_lines_until_the_run_ends(client):
    run = client.start("hello", {"lines": 1, "linger_s": 1.0})
    followed = client.stub.GetRunLogs(trainer_service_pb2.GetRunLogsRequest(name=run.name, follow=True), timeout=120)
    texts = [line.text for batch in followed for line in batch.lines]
    assert "line 0 rank 0" in texts
    assert client.stub.GetRun(trainer_service_pb2.GetRunRequest(name=run.name)).run.state == run_pb2.RUN_STATE_SUCCEEDED


def test_user_error_fails_the_run_with_rank_and_traceback(client):
    run = client.wait_done(client.start("raises").name)
    assert run.state == run_pb2.RUN_STATE_FAILED
    assert run.failure.kind == common_pb2.FAILURE_KIND_USER_CODE and run.failure.rank == 0
    assert run.failure.message == "ValueError: learning rate must be positive"
    assert "trainer_test_entrypoints.py" in run.failure.traceback
    assert run.state_reason.startswith("rank 0 raised ValueError: learning rate must be positive")
    events = client.stub.WatchRun(trainer_service_pb2.WatchRunRequest(name=run.name), timeout=60)
    last = [e.event.state_change for e in events if e.event.HasField("state_change")][-1]
    assert last.to_state == run_pb2.RUN_STATE_FAILED and last.failure == run.failure, "the event carries it too"


def test_warm_pool_reuses_a_group_of_the_same_shape(client):
    first = client.wait_done(client.start("hello", {"lines": 0}).name)
    hits = metrics.POOL_REQUESTS.labels(result="hit")._value.get()
    second = client.wait_done(client.start("hello", {"lines": 0}).name)
    assert first.state == second.state == run_pb2.RUN_STATE_SUCCEEDED
    assert second.workers[0].warm
    assert metrics.POOL_REQUESTS.labels(result="hit")._value.get() == hits + 1


def test_allowlist_and_bad_requests(client):
    with pytest.raises(grpc.RpcError) as denied:
        client.stub.StartRun(trainer_service_pb2.StartRunRequest(spec=common_pb2.TrainingSpec(entrypoint="os:system")))
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "'os'" in denied.value.details()
    bad = client.spec("hello")
    bad.entrypoint = "trainer_test_entrypoints.hello"
    with pytest.raises(grpc.RpcError) as invalid:
        client.stub.StartRun(trainer_service_pb2.StartRunRequest(spec=bad))
    assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert invalid.value.details().startswith("spec.entrypoint:")
    gpus = client.spec("hello", num_workers=2)
    gpus.resources_per_worker.num_gpus = 0.5
    with pytest.raises(grpc.RpcError) as fractional:
        client.stub.StartRun(trainer_service_pb2.StartRunRequest(spec=gpus))
    assert fractional.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert fractional.value.details().startswith("spec.resources_per_worker.num_gpus:")
    # Once INTERNAL at every StartRun the scheduler retried: now the rules CreateJob applies.
    nan = client.spec("hello")
    nan.config.update({"lr": float("nan")})
    forever = trainer_service_pb2.StartRunRequest(spec=client.spec("hello"))
    forever.timeout.seconds = 2**63 - 1
    for request, field in ((trainer_service_pb2.StartRunRequest(spec=nan), "spec.config.lr:"), (forever, "timeout:")):
        with pytest.raises(grpc.RpcError) as refused:
            client.stub.StartRun(request)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert refused.value.details().startswith(field)
    with pytest.raises(grpc.RpcError) as missing:
        client.stub.GetRun(trainer_service_pb2.GetRunRequest(name="runs/nope"))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    for stream in (
        client.stub.WatchRun(trainer_service_pb2.WatchRunRequest(name="runs/nope")),
        client.stub.GetRunLogs(trainer_service_pb2.GetRunLogsRequest(name="runs/nope")),
    ):
        with pytest.raises(grpc.RpcError) as missing_stream:
            list(stream)
        assert missing_stream.value.code() == grpc.StatusCode.NOT_FOUND
    for name in ("jobs/1", "runs/Bad_Id"):  # malformed names are INVALID_ARGUMENT, as GetJob's are
        with pytest.raises(grpc.RpcError) as bad_name:
            client.stub.GetRun(trainer_service_pb2.GetRunRequest(name=name))
        assert bad_name.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert bad_name.value.details().startswith("name:")
    with pytest.raises(grpc.RpcError) as bad_token:
        client.stub.ListRuns(trainer_service_pb2.ListRunsRequest(page_token="not-a-token"))
    assert bad_token.value.details().startswith("page_token:")


def test_request_id_is_idempotent_and_list_pages(client):
    first = client.start("hello", {"lines": 0}, request_id="req-1", job="jobs/42")
    # A retry sends what is left of its timeout: the one field a repeat need not repeat.
    again = client.start("hello", {"lines": 0}, request_id="req-1", job="jobs/42", timeout={"seconds": 50})
    assert first.name == again.name
    with pytest.raises(grpc.RpcError) as reused:
        client.start("hello", {"lines": 1}, request_id="req-1", job="jobs/42")
    assert reused.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert reused.value.details().startswith("request_id: already used by a different request")
    client.wait_done(first.name)
    page = client.stub.ListRuns(trainer_service_pb2.ListRunsRequest(job="jobs/42", page_size=1))
    assert [r.name for r in page.runs] == [first.name] and page.next_page_token == ""
    everything, token = [], ""
    while True:
        page = client.stub.ListRuns(trainer_service_pb2.ListRunsRequest(page_size=2, page_token=token))
        everything += [r.name for r in page.runs]
        token = page.next_page_token
        if not token:
            break
    assert first.name in everything and len(everything) == len(set(everything))
    times = [r.create_time.ToNanoseconds() for r in client.stub.ListRuns(trainer_service_pb2.ListRunsRequest()).runs]
    assert times == sorted(times, reverse=True)


def test_cluster_resources_come_from_ray(client):
    resources = client.stub.GetClusterResources(trainer_service_pb2.GetClusterResourcesRequest())
    assert resources.total.num_cpus == 2
    assert 0 <= resources.available.num_cpus <= 2
    assert resources.total.memory_bytes > 0
    assert len(resources.nodes) == 1 and resources.nodes[0].total.num_cpus == 2


def test_working_dir_and_env_vars_reach_the_workers(client, trainer, tmp_path, monkeypatch):
    code = tmp_path / "code"
    code.mkdir()
    (code / "shipped_entry.py").write_text(
        "import os\n"
        "def main(config, ctx):\n"
        "    print('cwd has', sorted(os.listdir('.')))\n"
        "    ctx.report({'flag': float(os.environ['SHIPPED_FLAG'])})\n"
    )
    monkeypatch.setattr(trainer.settings, "entrypoint_allowlist", ["shipped_entry"])
    spec = common_pb2.TrainingSpec(
        entrypoint="shipped_entry:main",
        runtime_env=common_pb2.RuntimeEnv(working_dir=str(code), env_vars={"SHIPPED_FLAG": "7"}),
    )
    run = client.wait_done(client.stub.StartRun(trainer_service_pb2.StartRunRequest(spec=spec)).run.name)
    assert run.state == run_pb2.RUN_STATE_SUCCEEDED, run.state_reason
    assert run.latest_metrics.metrics["flag"] == 7.0
    logs = client.stub.GetRunLogs(trainer_service_pb2.GetRunLogsRequest(name=run.name))
    assert "cwd has ['shipped_entry.py']" in [line.text for batch in logs for line in batch.lines]
    idle_with_working_dir = [i for i in trainer.pool._idle if i.group.spec.env.working_dir]
    assert idle_with_working_dir == [], "groups with a working_dir are not kept warm"


@pytest.mark.parametrize("extra,through_ray", [({}, False), ({"LD_BIND_NOW": "1"}, True)])
def test_env_vars_reach_the_workers_without_a_ray_runtime_env_unless_one_must_be_set_at_start(client, extra, through_ray):
    spec = client.spec("env_seen")
    spec.runtime_env.env_vars.update({"RUN_FLAG": "7", "RUN_EXPANDED": "${PATH}:tail", **extra})
    run = client.wait_done(client.stub.StartRun(trainer_service_pb2.StartRunRequest(spec=spec)).run.name)
    assert run.state == run_pb2.RUN_STATE_SUCCEEDED, run.state_reason
    seen = run.latest_metrics.metrics
    assert seen["flag"] == 7.0 and seen["expanded"] == 1.0
    assert seen["ray_runtime_env"] == float(through_ray)
    if not through_ray:  # PYTHONPATH's entries come first, as the interpreter would have put them
        assert seen["worker_code_first"] == 1.0


def test_a_worker_imports_no_arrow_or_pydantic_until_its_code_does_and_then_has_rays_serializers(client):
    run = client.wait_done(client.start("serialization_addons").name)
    assert run.state == run_pb2.RUN_STATE_SUCCEEDED, run.state_reason
    seen = run.latest_metrics.metrics
    assert {k: v for k, v in seen.items() if k.endswith("_before")} == {
        "numpy_before": 0.0, "pyarrow_before": 0.0, "pydantic_before": 0.0, "starlette_before": 0.0}
    assert seen["arrow_serializer_after"] == 1.0


def test_runs_survive_a_trainer_restart(client, trainer):
    done = client.wait_done(client.start("hello", {"lines": 0}).name)
    before = [r.event for r in client.stub.WatchRun(trainer_service_pb2.WatchRunRequest(name=done.name))]
    restarted = Trainer(trainer.settings)
    restarted.load_runs()
    assert len(restarted.registry.all()) >= 1
    server = ServerThread(trainer.settings, registrations(restarted))
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = trainer_service_pb2_grpc.TrainerServiceStub(channel)
            again = stub.GetRun(trainer_service_pb2.GetRunRequest(name=done.name)).run
            after = [r.event for r in stub.WatchRun(trainer_service_pb2.WatchRunRequest(name=done.name))]
    finally:
        server.stop()
    assert again.state == run_pb2.RUN_STATE_SUCCEEDED
    assert again.latest_metrics == done.latest_metrics and again.create_time == done.create_time
    assert after == before


def test_large_logs_stream_in_messages_a_default_client_accepts(client, trainer):
    run = client.wait_done(client.start("hello", {"lines": 0}).name)
    log = Path(trainer.settings.storage_root) / "runs" / run.name.split("/")[-1] / "logs" / "rank-0.stdout.log"
    with open(log, "a") as f:
        for i in range(6000):  # 6 MB: above the 4 MiB a gRPC client accepts in one message by default
            f.write(f"{2e9 + i:.6f}\tbulk {i:05d} {'x' * 1000}\n")
    batches = list(client.stub.GetRunLogs(trainer_service_pb2.GetRunLogsRequest(name=run.name), timeout=60))
    bulk = [line.text[:10] for batch in batches for line in batch.lines if line.text.startswith("bulk")]
    assert bulk == [f"bulk {i:05d}" for i in range(6000)]
    assert all(batch.ByteSize() < 2 * 2**20 for batch in batches)
    tail = [line.text for batch in client.stub.GetRunLogs(
        trainer_service_pb2.GetRunLogsRequest(name=run.name, rank=0, tail_lines=2)
    ) for line in batch.lines]
    assert len(tail) == 2 and tail[-1].startswith("bulk 05999")


def test_list_runs_rejects_an_unknown_state(client):
    with pytest.raises(grpc.RpcError) as unknown:
        client.stub.ListRuns(trainer_service_pb2.ListRunsRequest(states=[99]))
    assert unknown.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert unknown.value.details() == "states: 99 is not a run state"
