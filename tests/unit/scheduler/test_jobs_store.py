"""JobManager and JobStore against a real Redis: create, idempotency, the state machine,
listing, deletion and events, asserting on the keys each call writes."""

from __future__ import annotations

import asyncio

import pytest

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2
from paddleray.services.common import errors
from paddleray.services.common.identity import LOCAL, Identity, Role
from paddleray.services.common.resources import Amounts
from paddleray.services.scheduler import keys
from paddleray.services.scheduler.job_states import IllegalTransition
from paddleray.services.scheduler.store import Claim
from support.scheduler import make_job

pytestmark = pytest.mark.unit
J = job_pb2.JobState


async def test_create_writes_record_indexes_queue_and_first_event(manager, raw_redis):
    job = await manager.create(make_job(labels={"team": "vision"}), job_id="alpha", caller=LOCAL)
    assert job.name == "jobs/alpha" and job.state == J.JOB_STATE_QUEUED and job.tenant == "default"
    fields = await raw_redis.hgetall(keys.job("alpha"))
    assert fields[b"state"] == str(J.JOB_STATE_QUEUED).encode() and fields[b"cpu_m"] == b"1000"
    assert job_pb2.Job.FromString(fields[b"proto"]) == job
    assert await raw_redis.zscore(keys.queue(), "alpha") is not None
    assert await raw_redis.sismember(keys.state_set(J.JOB_STATE_QUEUED), "alpha")
    assert await raw_redis.zcard(keys.by_time()) == 1 and await raw_redis.zcard(keys.by_tenant("default")) == 1
    events = [e async for e in _take(manager.watch("jobs/alpha", 0, caller=LOCAL), 1)]
    assert events[0].sequence == 1 and events[0].state_change.to_state == J.JOB_STATE_QUEUED


async def test_update_refuses_to_change_the_state_which_only_transition_and_claim_record(manager):
    await manager.create(make_job(), job_id="keep", caller=LOCAL)
    record = await manager.record("jobs/keep")
    job = job_pb2.Job()
    job.CopyFrom(record.job)
    job.state = J.JOB_STATE_SUCCEEDED
    with pytest.raises(ValueError, match="transition"):
        await manager.update(record, job)
    assert (await manager.get("jobs/keep", caller=LOCAL)).state == J.JOB_STATE_QUEUED


async def test_request_id_makes_create_idempotent(manager, raw_redis):
    first = await manager.create(make_job(), request_id="req-1", caller=LOCAL)
    again = await manager.create(make_job(), request_id="req-1", caller=LOCAL)
    assert again == first
    assert await raw_redis.zcard(keys.by_time()) == 1
    assert 0 < await raw_redis.ttl(keys.request("req-1")) <= 24 * 3600
    assert len(await raw_redis.hget(keys.job(first.name[5:]), "request_fp")) == 64


async def test_a_request_id_reused_with_a_different_request_is_already_exists(manager, raw_redis):
    first = await manager.create(make_job(), request_id="req-1", caller=LOCAL)
    for different in ({"job": make_job(priority=5)}, {"job": make_job(config={"lr": 0.1})},
                      {"job": make_job(tenant="team-b")}, {"job": make_job(), "job_id": "named"}):
        with pytest.raises(errors.AlreadyExists, match="^request_id: already used by a different request"):
            await manager.create(**different, request_id="req-1", caller=LOCAL)
    assert await raw_redis.zcard(keys.by_time()) == 1
    # A job stored before requests had fingerprints is returned to any repeat of its request_id.
    await raw_redis.hdel(keys.job(first.name[5:]), "request_fp")
    assert await manager.create(make_job(priority=5), request_id="req-1", caller=LOCAL) == first


async def test_create_needs_a_caller_and_checks_the_spec_with_its_rights(manager, raw_redis):
    """Issue 22.5: no caller is a TypeError (once, the spec was checked as whoever the call
    context held, an admin by default), and the caller given is the one prepare_spec sees."""
    seen = []

    async def prepare(spec, field, *, caller):
        seen.append((field, caller))
        return spec

    manager.prepare_spec = prepare
    with pytest.raises(TypeError, match="caller"):
        await manager.create(make_job(), job_id="nobody")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="caller"):
        await manager.create_trial(make_job(), "experiments/e", {}, job_id="nobody")  # type: ignore[call-arg]
    assert seen == [] and await raw_redis.zcard(keys.by_time()) == 0
    member = Identity("team-a", Role.MEMBER, "member-a")
    await manager.create(make_job(tenant="team-a"), job_id="a", caller=member)
    assert seen == [("job.spec", member)]


async def test_the_fingerprint_is_the_request_before_its_references_are_resolved(manager):
    resolved = iter(range(100))

    async def resolve(spec, field, *, caller):  # as init_from's job may checkpoint again between two tries
        copy = common_pb2.TrainingSpec()
        copy.CopyFrom(spec)
        copy.init_from.resolved_uri = f"/ckpt/{next(resolved)}"
        return copy

    manager.prepare_spec = resolve
    first = await manager.create(make_job(), request_id="req-1", caller=LOCAL)
    assert await manager.create(make_job(), request_id="req-1", caller=LOCAL) == first
    assert first.spec.init_from.resolved_uri == "/ckpt/0"


async def test_concurrent_creates_with_one_request_id_yield_one_job(manager, raw_redis):
    jobs = await asyncio.gather(*(manager.create(make_job(), request_id="same", caller=LOCAL) for _ in range(20)))
    assert len({j.name for j in jobs}) == 1
    assert await raw_redis.zcard(keys.queue()) == 1


async def test_taken_job_id_is_already_exists(manager):
    await manager.create(make_job(), job_id="taken", caller=LOCAL)
    with pytest.raises(errors.AlreadyExists):
        await manager.create(make_job(), job_id="taken", caller=LOCAL)


async def test_illegal_transitions_are_refused_and_legal_ones_timestamped(manager, raw_redis):
    await manager.create(make_job(), job_id="sm", caller=LOCAL)
    with pytest.raises(IllegalTransition):
        await manager.transition("sm", J.JOB_STATE_SUCCEEDED, "skip ahead")
    done = await manager.transition("sm", J.JOB_STATE_CANCELLED, "user")
    assert done.end_time.seconds > 0 and done.state_reason == "user"
    assert await raw_redis.zscore(keys.queue(), "sm") is None
    assert not await raw_redis.sismember(keys.state_set(J.JOB_STATE_QUEUED), "sm")
    assert await raw_redis.sismember(keys.state_set(J.JOB_STATE_CANCELLED), "sm")
    for target in (J.JOB_STATE_QUEUED, J.JOB_STATE_STARTING, J.JOB_STATE_RUNNING, J.JOB_STATE_FAILED):
        with pytest.raises(IllegalTransition):
            await manager.transition("sm", target, "after the end")


async def test_racing_transitions_only_one_wins(manager):
    await manager.create(make_job(), job_id="race", caller=LOCAL)
    results = await asyncio.gather(
        manager.transition("race", J.JOB_STATE_CANCELLED, "a"),
        manager.transition("race", J.JOB_STATE_EARLY_STOPPED, "b"),
        return_exceptions=True,
    )
    assert sum(isinstance(r, job_pb2.Job) for r in results) == 1
    assert sum(isinstance(r, IllegalTransition) for r in results) == 1
    events = [e async for e in manager.watch("jobs/race", 0, caller=LOCAL)]
    assert [e.sequence for e in events] == [1, 2]


async def test_cancel_queued_is_immediate_and_terminal_fires_hook(manager):
    seen = []

    async def on_terminal(name, state):
        seen.append((name, state))

    manager.hooks.on_terminal(on_terminal)
    await manager.create(make_job(), job_id="c1", caller=LOCAL)
    job = await manager.cancel("jobs/c1", "no longer needed", caller=LOCAL)
    assert job.state == J.JOB_STATE_CANCELLED and job.state_reason == "no longer needed"
    assert seen == [("jobs/c1", J.JOB_STATE_CANCELLED)]
    assert (await manager.cancel("jobs/c1", caller=LOCAL)).state == J.JOB_STATE_CANCELLED  # unchanged


async def test_stop_early_of_a_queued_trial(manager):
    trial = await manager.create_trial(make_job(), "experiments/e1", {"lr": "0.1"}, job_id="t1", caller=LOCAL)
    assert trial.experiment == "experiments/e1" and trial.trial_parameters == {"lr": "0.1"}
    job = await manager.stop_early("jobs/t1", "asha rung 1")
    assert job.state == J.JOB_STATE_EARLY_STOPPED and job.state_reason == "asha rung 1"


async def test_delete_only_terminal_jobs_and_all_their_keys(manager, raw_redis):
    await manager.create(make_job(tenant="team-a"), job_id="d1", caller=LOCAL)
    with pytest.raises(errors.FailedPrecondition):
        await manager.delete("jobs/d1", caller=LOCAL)
    await manager.cancel("jobs/d1", caller=LOCAL)
    await manager.delete("jobs/d1", caller=LOCAL)
    assert not await raw_redis.exists(keys.job("d1"), keys.events("d1"))
    assert await raw_redis.zcard(keys.by_time()) == 0 and await raw_redis.zcard(keys.by_tenant("team-a")) == 0
    assert await raw_redis.scard(keys.state_set(J.JOB_STATE_CANCELLED)) == 0
    with pytest.raises(errors.NotFound):
        await manager.delete("jobs/d1", caller=LOCAL)


async def test_list_filters(manager):
    await manager.create(make_job(tenant="a", labels={"k": "x"}), job_id="j1", caller=LOCAL)
    await manager.create(make_job(tenant="b", labels={"k": "y"}), job_id="j2", caller=LOCAL)
    await manager.create_trial(make_job(tenant="a"), "experiments/e", {}, job_id="j3", caller=LOCAL)
    await manager.cancel("jobs/j2", caller=LOCAL)

    async def names(**kw):
        args = {"page_size": 0, "page_token": "", "states": [], "labels": {}, "experiment": "", "tenant": ""} | kw
        jobs, _ = await manager.list(**args, caller=LOCAL)
        return [j.name for j in jobs]

    assert await names() == ["jobs/j3", "jobs/j2", "jobs/j1"]
    assert await names(tenant="a") == ["jobs/j3", "jobs/j1"]
    assert await names(labels={"k": "y"}) == ["jobs/j2"]
    assert await names(states=[J.JOB_STATE_CANCELLED]) == ["jobs/j2"]
    assert await names(experiment="experiments/e") == ["jobs/j3"]
    with pytest.raises(errors.InvalidArgument, match="page_token"):
        await names(page_token="garbage")
    with pytest.raises(errors.InvalidArgument, match="page_size"):
        await names(page_size=-1)
    assert await names(page_size=1001) == ["jobs/j3", "jobs/j2", "jobs/j1"], "above the maximum is coerced (AIP-158)"
    _, token = await manager.list(1, "", [], {}, "", "a", caller=LOCAL)
    assert token
    with pytest.raises(errors.InvalidArgument, match="page_token") as other_filters:
        await names(page_token=token, tenant="b")
    assert "other filters" in other_filters.value.rule
    assert await names(page_token=token, tenant="a") == ["jobs/j1"]


async def test_pagination_is_stable_while_jobs_are_created(manager):
    for i in range(25):
        await manager.create(make_job(), job_id=f"p{i:02d}", caller=LOCAL)
    seen, token = [], ""
    while True:
        page, token = await manager.list(7, token, [], {}, "", "", caller=LOCAL)
        seen += [j.name for j in page]
        # Jobs created between pages are newer than every page so far: they must not shift pages.
        await manager.create(make_job(), caller=LOCAL)
        if not token:
            break
    assert seen == [f"jobs/p{i:02d}" for i in reversed(range(25))]


async def test_watch_resumes_by_sequence_and_out_of_range_when_trimmed(manager):
    await manager.create(make_job(max_retries=0), job_id="w", caller=LOCAL)
    await manager.transition("w", J.JOB_STATE_CANCELLED, "done")
    events = [e async for e in manager.watch("jobs/w", 1, caller=LOCAL)]
    assert [e.sequence for e in events] == [2]
    assert events[0].state_change.to_state == J.JOB_STATE_CANCELLED
    # The fixture caps streams at 50 events: flood a job with metrics events to trim it.
    await manager.create(make_job(), job_id="long", caller=LOCAL)
    for _ in range(60):
        record = await manager.store.get("long")
        event = job_pb2.JobEvent(metrics={"step": 1})
        assert await manager.update(record, record.job, [event])
    with pytest.raises(errors.OutOfRange):
        async for _ in manager.watch("jobs/long", 2, caller=LOCAL):
            pass


async def _take(stream, n):
    count = 0
    async for item in stream:
        yield item
        count += 1
        if count == n:
            return


async def test_queue_orders_by_priority_then_fifo_and_ages_waiting_jobs(raw_redis):
    from paddleray.services.scheduler.jobs import JobManager
    from paddleray.services.scheduler.store import JobStore

    # One priority point is worth a minute of waiting: priority decides, ties go FIFO.
    manager = JobManager(JobStore(raw_redis), aging_s_per_priority=60.0)
    await manager.create(make_job(priority=0), job_id="first", caller=LOCAL)
    await manager.create(make_job(priority=0), job_id="second", caller=LOCAL)
    await manager.create(make_job(priority=10), job_id="urgent", caller=LOCAL)
    assert await manager.store.queue_head(10) == ["urgent", "first", "second"]
    await raw_redis.flushdb()
    # One point per millisecond: a job that waited 200 ms outranks a newer one 10 points higher.
    manager = JobManager(JobStore(raw_redis), aging_s_per_priority=0.001)
    await manager.create(make_job(priority=0), job_id="patient", caller=LOCAL)
    await asyncio.sleep(0.2)
    await manager.create(make_job(priority=10), job_id="newcomer", caller=LOCAL)
    assert await manager.store.queue_head(10) == ["patient", "newcomer"]


async def test_a_create_resent_after_a_dropped_reply_returns_the_job_not_already_exists(manager):
    real_create = manager.store.create

    async def executed_twice(*args, **kwargs):
        # The first send ran on Redis but its reply was lost; redis-py sent it again.
        await real_create(*args, **kwargs)
        return await real_create(*args, **kwargs)

    manager.store.create = executed_twice
    job = await manager.create(make_job(), job_id="resent", caller=LOCAL)
    assert job.name == "jobs/resent" and job.state == J.JOB_STATE_QUEUED
    manager.store.create = real_create
    with pytest.raises(errors.AlreadyExists):
        await manager.create(make_job(), job_id="resent", caller=LOCAL)


async def test_creates_survive_redis_losing_its_script_cache(manager, raw_redis):
    await manager.create(make_job(), job_id="before", caller=LOCAL)
    await raw_redis.script_flush()
    jobs = await asyncio.gather(*(manager.create(make_job(), job_id=f"after-{i}", caller=LOCAL) for i in range(5)))
    assert [j.name for j in jobs] == [f"jobs/after-{i}" for i in range(5)]
    assert await raw_redis.zcard(keys.queue()) == 6


async def test_claim_records_the_attempt_and_its_transition_in_one_place(manager, raw_redis):
    await manager.create(make_job(), job_id="cl", caller=LOCAL)
    roomy = Claim(Amounts(cpu_m=4000, gpu_m=0, mem=1 << 40))
    record = await manager.store.get("cl")
    result = await manager.claim(record, "replica-a", 10_000, roomy)
    assert result.ok
    job = await manager.get("jobs/cl", caller=LOCAL)
    assert job.state == J.JOB_STATE_STARTING and job.state_reason == "dispatched" and job.start_time.seconds
    assert [(a.number, a.state) for a in job.attempts] == [(1, J.JOB_STATE_STARTING)]
    assert (await manager.store.get("cl")).owner == "replica-a"
    assert await raw_redis.zscore(keys.leases(), "cl") is not None
    events = [e async for e in _take(manager.watch("jobs/cl", 1, caller=LOCAL), 1)]
    assert (events[0].attempt, events[0].state_change.to_state) == (1, J.JOB_STATE_STARTING)
    assert (await manager.claim(record, "replica-b", 10_000, roomy)).status == "conflict", "a stale read loses"
    fresh = await manager.store.get("cl")
    assert (await manager.claim(fresh, "replica-b", 10_000, roomy)).status == "conflict", "STARTING is not waiting"
    # A retry resumes from the newest checkpoint and names itself.
    def with_checkpoint(j):
        j.latest_checkpoint.CopyFrom(common_pb2.Checkpoint(uri="mem://c", step=4))

    await manager.transition("cl", J.JOB_STATE_RETRYING, "attempt failed", mutate=with_checkpoint, owner="replica-a",
                             delay_until_ms=0)
    assert await manager.store.promote_delayed() == 1  # its backoff (none) ended: back in the queue
    assert (await manager.claim(await manager.store.get("cl"), "replica-a", 10_000, roomy)).ok
    job = await manager.get("jobs/cl", caller=LOCAL)
    assert job.state_reason == "retry 1" and job.attempts[1].resumed_from.step == 4


async def test_a_job_that_ends_other_than_succeeded_carries_the_failure_its_state_implies(manager):
    await manager.create(make_job(), job_id="f1", caller=LOCAL)
    job = await manager.transition("f1", J.JOB_STATE_CANCELLED, "no longer needed")
    assert job.failure == common_pb2.Failure(kind=common_pb2.FAILURE_KIND_STOPPED, message="no longer needed")
    await manager.create(make_job(), job_id="f2", caller=LOCAL)
    given = common_pb2.Failure(kind=common_pb2.FAILURE_KIND_USER_CODE, rank=1, message="ValueError: x")
    await manager.transition("f2", J.JOB_STATE_STARTING, "test")
    job = await manager.transition("f2", J.JOB_STATE_FAILED, "rank 1 raised", failure=given)
    assert job.failure == given
