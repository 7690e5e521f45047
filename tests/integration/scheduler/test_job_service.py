"""JobService over real gRPC: status codes, idempotency, listing, deletion, watch resume."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from paddleray.scheduler.v1 import job_pb2
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.services.client.specs import load_job
from paddleray.services.common import paging
from support.scheduler import make_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
J = job_pb2.JobState


async def _code(call) -> tuple[grpc.StatusCode, str]:
    try:
        result = call()
        if hasattr(result, "__aiter__"):
            async for _ in result:
                pass
        else:
            await result
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details()
    return grpc.StatusCode.OK, ""


async def test_bad_input_is_invalid_argument_naming_the_field(stack_factory):
    async with stack_factory(dispatch=False) as stack:
        bad = make_job(gpus=float("nan"))
        code, details = await _code(lambda: stack.stub.CreateJob(js.CreateJobRequest(job=bad)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert details.startswith("job.spec.resources_per_worker.num_gpus:") and "finite" in details
        # The same as a google.rpc.BadRequest field violation, for clients that read status details.
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stack.stub.CreateJob(js.CreateJobRequest(job=bad))
        [detail] = rpc_status.from_call(refused.value).details
        violation = error_details_pb2.BadRequest()
        assert detail.Unpack(violation) and [(v.field, v.description) for v in violation.field_violations] == [
            ("job.spec.resources_per_worker.num_gpus", details.partition(": ")[2])]
        code, details = await _code(lambda: stack.stub.CreateJob(js.CreateJobRequest()))
        assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, "job: required")
        for name in ("job/x", "jobs/Bad_Id"):
            code, details = await _code(lambda name=name: stack.stub.GetJob(js.GetJobRequest(name=name)))
            assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("name:")
        code, _ = await _code(lambda: stack.stub.GetJob(js.GetJobRequest(name="jobs/absent")))
        assert code == grpc.StatusCode.NOT_FOUND
        code, details = await _code(lambda: stack.stub.ListJobs(js.ListJobsRequest(page_token="%%%")))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("page_token:")
        code, details = await _code(lambda: stack.stub.WatchJob(js.WatchJobRequest(name="jobs/absent")))
        assert code == grpc.StatusCode.NOT_FOUND


def _nested(levels: int) -> job_pb2.Job:
    job = make_job()
    node = job.spec.config
    for _ in range(levels):
        node = node.fields["a"].struct_value
    return job


def _with(change) -> job_pb2.Job:
    job = make_job()
    change(job)
    return job


async def test_specs_the_trainer_could_not_run_are_refused_at_create(stack_factory):
    """Each of these was accepted, then answered INTERNAL by the trainer at every StartRun retry."""
    async with stack_factory(dispatch=False) as stack:
        cases = {
            "job.spec.config.lr": make_job(config={"lr": float("nan")}),
            "job.spec.config.a": _nested(30),  # decodes here, but not inside the messages that carry it
            "job.spec.runtime_env.working_dir": _with(lambda j: setattr(j.spec.runtime_env, "working_dir", "/" + "w" * 5000)),
            "job.spec.resources_per_worker.num_cpus": make_job(cpus=1.8e305),
            "job.timeout": _with(lambda j: setattr(j.timeout, "seconds", 2**63 - 1)),
        }
        for field, job in cases.items():
            code, details = await _code(lambda job=job: stack.stub.CreateJob(js.CreateJobRequest(job=job)))
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (field, code, details)
            assert details.startswith(field), (field, details)
        # Past protobuf's own nesting limit the request is not even decodable (sent as bytes:
        # the client library refuses to build it).
        job_bytes = _nested(60).SerializeToString()
        raw = b"\x0a" + _varint(len(job_bytes)) + job_bytes
        async with grpc.aio.insecure_channel(stack.address) as channel:
            create = channel.unary_unary("/paddleray.scheduler.v1.JobService/CreateJob")
            code, details = await _code(lambda: create(raw))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("request:")
        assert not (await stack.stub.ListJobs(js.ListJobsRequest())).jobs


async def test_zero_workers_or_cpus_are_invalid_argument_and_unset_is_one(stack_factory):
    """num_workers and num_cpus have explicit presence: an explicit 0 is refused naming the
    field; a client that leaves them unset (as every client generated before sends a 0) gets 1."""
    async with stack_factory(dispatch=False) as stack:
        for job, field in ((make_job(workers=0), "job.spec.num_workers"),
                           (make_job(cpus=0), "job.spec.resources_per_worker.num_cpus")):
            code, details = await _code(lambda job=job: stack.stub.CreateJob(js.CreateJobRequest(job=job)))
            assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(f"{field}: "), details
            assert "leave it unset for 1" in details
        unset = make_job()
        unset.spec.ClearField("num_workers")
        unset.spec.resources_per_worker.ClearField("num_cpus")
        created = await stack.create(unset)
        assert not created.spec.HasField("num_workers") and not created.spec.resources_per_worker.HasField("num_cpus")
        assert [j.name for j in (await stack.stub.ListJobs(js.ListJobsRequest())).jobs] == [created.name]


async def test_a_dataset_not_under_the_storage_root_is_refused_at_create_naming_the_root(stack_factory, tmp_path):
    """A spec file's data/ beside it is the client's, not the cluster's: refused by CreateJob
    (it was accepted, then failed by the trainer at every StartRun)."""
    root, project = tmp_path / "storage", tmp_path / "project"
    for folder in (root, project):
        (folder / "data").mkdir(parents=True)
        (folder / "data" / "train.csv").write_text("x,y\n1,2\n")
        (folder / "job.yaml").write_text("entrypoint: pkg.train:main\ndatasets: [{name: train, uri: data/train.csv}]\n")
    async with stack_factory(dispatch=False, storage_root=root) as stack:
        outside, _ = load_job(project / "job.yaml")
        code, details = await _code(lambda: stack.stub.CreateJob(js.CreateJobRequest(job=outside)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("job.spec.datasets[0].uri: "), details
        assert f"{project / 'data' / 'train.csv'}' is not under the storage root ({root.resolve()})" in details
        missing = make_job()
        missing.spec.datasets.add(name="train", uri="data/absent.csv")
        code, details = await _code(lambda: stack.stub.CreateJob(js.CreateJobRequest(job=missing)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "no such file or directory under the storage root" in details
        inside, _ = load_job(root / "job.yaml")  # a spec file in the storage root: its data/ is the root's
        created = await stack.create(inside)
        assert created.spec.datasets[0].uri == str(root / "data" / "train.csv")
        relative = make_job()  # a raw client's relative path is the storage root's, as the trainer reads it
        relative.spec.datasets.add(name="train", uri="data/train.csv")
        assert (await stack.create(relative)).spec.datasets[0].uri == "data/train.csv"


def _varint(n: int) -> bytes:
    out = b""
    while n > 0x7F:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


async def test_same_request_id_twice_is_one_job(stack_factory):
    async with stack_factory(dispatch=False) as stack:
        first = await stack.create(make_job(), request_id="once")
        second = await stack.create(make_job(), request_id="once")
        assert first.name == second.name
        # The same request_id with another request: ALREADY_EXISTS naming request_id (AIP-155),
        # not the first job handed back as if it were the one asked for.
        code, details = await _code(lambda: stack.create(make_job(priority=7), request_id="once"))
        assert code == grpc.StatusCode.ALREADY_EXISTS
        assert details.startswith("request_id: already used by a different request")
        listed = (await stack.stub.ListJobs(js.ListJobsRequest())).jobs
        assert [j.name for j in listed] == [first.name]
        code, _ = await _code(lambda: stack.stub.CreateJob(js.CreateJobRequest(job=make_job(), job_id=first.name[5:])))
        assert code == grpc.StatusCode.ALREADY_EXISTS


async def test_delete_rules(stack_factory):
    async with stack_factory(dispatch=False) as stack:
        job = await stack.create(make_job(), job_id="del")
        code, _ = await _code(lambda: stack.stub.DeleteJob(js.DeleteJobRequest(name=job.name)))
        assert code == grpc.StatusCode.FAILED_PRECONDITION
        cancelled = (await stack.stub.CancelJob(js.CancelJobRequest(name=job.name))).job
        assert cancelled.state == J.JOB_STATE_CANCELLED
        await stack.stub.DeleteJob(js.DeleteJobRequest(name=job.name))
        code, _ = await _code(lambda: stack.stub.GetJob(js.GetJobRequest(name=job.name)))
        assert code == grpc.StatusCode.NOT_FOUND


async def test_watch_reconnect_with_last_sequence_misses_nothing(stack_factory):
    async with stack_factory() as stack:
        job = await stack.create(make_job(config={"steps": 6, "step_s": 0.05, "checkpoint_every": 3}), job_id="w")
        seen: list[job_pb2.JobEvent] = []
        # Read a few events, drop the stream, reconnect from the last sequence seen.
        stream = stack.stub.WatchJob(js.WatchJobRequest(name=job.name))
        async for response in stream:
            seen.append(response.event)
            if len(seen) == 3:
                break
        stream.cancel()
        await asyncio.sleep(0.2)
        seen += [e for e in await stack.events(job.name, after=seen[-1].sequence)]
        assert [e.sequence for e in seen] == list(range(1, len(seen) + 1))
        assert seen[-1].state_change.to_state == J.JOB_STATE_SUCCEEDED
        assert await stack.events(job.name, after=seen[-1].sequence) == []


async def test_trimmed_history_is_out_of_range(stack_factory):
    async with stack_factory(events_cap=10) as stack:
        job = await stack.create(make_job(config={"steps": 20, "step_s": 0.001}), job_id="long")
        await stack.wait_terminal(job.name)
        code, _ = await _code(lambda: stack.stub.WatchJob(js.WatchJobRequest(name=job.name, after_sequence=1)))
        assert code == grpc.StatusCode.OUT_OF_RANGE
        kept = await stack.events(job.name)
        assert len(kept) == 10 and kept[-1].state_change.to_state == J.JOB_STATE_SUCCEEDED


async def test_list_pages_over_grpc(stack_factory):
    async with stack_factory(dispatch=False) as stack:
        for i in range(5):
            await stack.create(make_job(labels={"parity": "even" if i % 2 == 0 else "odd"}), job_id=f"l{i}")
        names, token = [], ""
        while True:
            response = await stack.stub.ListJobs(js.ListJobsRequest(page_size=2, page_token=token,
                                                                    labels={"parity": "even"}))
            names += [j.name for j in response.jobs]
            token = response.next_page_token
            if not token:
                break
        assert names == ["jobs/l4", "jobs/l2", "jobs/l0"]


async def test_pages_of_large_jobs_end_early_by_bytes(stack_factory):
    """70 jobs of ~1 MiB configs made the default page exceed the message limit for everyone."""
    async with stack_factory(dispatch=False) as stack:
        for i in range(6):
            await stack.create(make_job(config={"blob": "x" * 900_000}), job_id=f"big{i}")
        names, token, pages = [], "", 0
        while True:
            response = await stack.stub.ListJobs(js.ListJobsRequest(page_token=token))
            assert response.ByteSize() <= paging.MAX_PAGE_BYTES + 64 * 1024 or len(response.jobs) == 1
            names += [j.name for j in response.jobs]
            pages += 1
            token = response.next_page_token
            if not token:
                break
        assert names == [f"jobs/big{i}" for i in reversed(range(6))]
        assert pages >= 2
        basic = await stack.stub.ListJobs(js.ListJobsRequest(view=job_pb2.JOB_VIEW_BASIC))
        assert [j.name for j in basic.jobs] == names and not basic.next_page_token
        assert all(not j.spec.HasField("config") and j.spec.entrypoint for j in basic.jobs)
        code, details = await _code(lambda: stack.stub.ListJobs(js.ListJobsRequest(view=9)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("view:")


async def test_logs_of_a_job_not_started_are_failed_precondition(stack_factory):
    async with stack_factory(dispatch=False) as stack:
        job = await stack.create(make_job(), job_id="waiting")
        code, details = await _code(lambda: stack.stub.GetJobLogs(js.GetJobLogsRequest(name=job.name)))
        assert code == grpc.StatusCode.FAILED_PRECONDITION and "not started" in details
        code, details = await _code(lambda: stack.stub.GetJobLogs(js.GetJobLogsRequest(name=job.name, attempt=-1)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("attempt:")


async def test_a_queued_job_has_no_events_stream_yet_and_watchers_see_every_event(stack_factory, redis_url):
    # A Redis stream preallocates 4 KB for its first event: a queued job keeps its one event in
    # its hash (docs/scaling.md), and the stream appears with the second event.
    import redis.asyncio as aioredis

    from paddleray.services.scheduler import keys

    client = aioredis.Redis.from_url(redis_url)
    try:
        async with stack_factory(dispatch=False) as stack:
            job = await stack.create(make_job(), job_id="queued")
            assert not await client.exists(keys.events("queued"))
            from_start = stack.stub.WatchJob(js.WatchJobRequest(name=job.name))
            first = (await asyncio.wait_for(anext(aiter(from_start)), 10)).event
            from_start.cancel()
            assert first.sequence == 1 and first.state_change.to_state == J.JOB_STATE_QUEUED
            # A watcher waiting after the first event gets the second when it comes.
            stream = stack.stub.WatchJob(js.WatchJobRequest(name=job.name, after_sequence=1))
            waiting = asyncio.ensure_future(anext(aiter(stream)))
            await asyncio.sleep(0.3)
            assert not waiting.done()
            await stack.stub.CancelJob(js.CancelJobRequest(name=job.name))
            second = (await asyncio.wait_for(waiting, 10)).event
            stream.cancel()
            assert second.sequence == 2 and second.state_change.to_state == J.JOB_STATE_CANCELLED
            assert await client.exists(keys.events("queued"))
            assert not await client.hexists(keys.job("queued"), "e1")
            assert [e.sequence for e in await stack.events(job.name)] == [1, 2]
    finally:
        await client.aclose()
