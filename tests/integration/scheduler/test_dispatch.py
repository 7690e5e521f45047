"""Dispatch end to end through gRPC: scheduler (in process) -> scripted trainer (real gRPC)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.services.scheduler import keys
from paddleray.trainer.v1 import run_pb2
from support.scheduler import make_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
J = job_pb2.JobState
R = run_pb2.RunState
F = common_pb2.FailureKind


async def test_job_runs_to_success_with_metrics_and_checkpoints_as_events(stack_factory):
    async with stack_factory() as stack:
        job = await stack.create(make_job(config={"steps": 4, "checkpoint_every": 2}), job_id="ok")
        done = await stack.wait_terminal(job.name)
        assert done.state == J.JOB_STATE_SUCCEEDED, done.state_reason
        assert len(done.attempts) == 1 and done.attempts[0].run and done.attempts[0].state == J.JOB_STATE_SUCCEEDED
        assert done.latest_metrics.step == 4 and done.latest_checkpoint.step == 4
        assert done.start_time.seconds and done.end_time.seconds
        events = await stack.events(job.name)
        assert [e.sequence for e in events] == list(range(1, len(events) + 1))
        states = [e.state_change.to_state for e in events if e.WhichOneof("payload") == "state_change"]
        assert states == [J.JOB_STATE_QUEUED, J.JOB_STATE_STARTING, J.JOB_STATE_RUNNING, J.JOB_STATE_SUCCEEDED]
        assert [e.metrics.step for e in events if e.WhichOneof("payload") == "metrics"] == [1, 2, 3, 4]
        assert [e.checkpoint.step for e in events if e.WhichOneof("payload") == "checkpoint"] == [2, 4]
        assert stack.fake.runs_created == {"ok-attempt-1": 1}
        # Everything it held is given back.
        reserved = await stack.app.redis.hgetall(keys.reserved())
        assert {k: int(v) for k, v in reserved.items()} == {b"cpu_m": 0, b"gpu_m": 0, b"mem": 0}
        assert await stack.app.redis.zcard(keys.leases()) == 0


async def test_failed_attempt_retries_from_its_last_checkpoint(stack_factory):
    async with stack_factory() as stack:
        spec = {"steps": 6, "checkpoint_every": 2, "fail_at_step": 5, "fail_times": 1}
        job = await stack.create(make_job(config=spec, max_retries=2), job_id="retry")
        done = await stack.wait_terminal(job.name)
        assert done.state == J.JOB_STATE_SUCCEEDED, done.state_reason
        assert [a.state for a in done.attempts] == [J.JOB_STATE_FAILED, J.JOB_STATE_SUCCEEDED]
        assert "step 5" in done.attempts[0].failure_reason
        assert done.attempts[0].failure.kind == F.FAILURE_KIND_USER_CODE and done.attempts[0].failure.rank == 0
        assert not done.HasField("failure") and not done.attempts[1].HasField("failure"), "success carries none"
        assert done.attempts[1].resumed_from.step == 4
        second = stack.fake.runs[done.attempts[1].run].run
        assert second.resume_from.step == 4
        assert stack.fake.runs_created == {"retry-attempt-1": 1, "retry-attempt-2": 1}
        states = [e.state_change.to_state for e in await stack.events(job.name) if e.WhichOneof("payload") == "state_change"]
        assert J.JOB_STATE_RETRYING in states


async def test_retries_are_bounded_by_max_retries(stack_factory):
    async with stack_factory() as stack:
        job = await stack.create(make_job(config={"fail_at_step": 1, "fail_times": 10}, max_retries=2), job_id="bad")
        done = await stack.wait_terminal(job.name)
        assert done.state == J.JOB_STATE_FAILED
        assert len(done.attempts) == 3 and all(a.state == J.JOB_STATE_FAILED for a in done.attempts)
        assert [a.failure.kind for a in done.attempts] == [F.FAILURE_KIND_USER_CODE] * 3
        assert done.failure == done.attempts[-1].failure


async def test_user_code_errors_can_be_made_non_retryable(stack_factory):
    async with stack_factory() as stack:
        job = make_job(config={"fail_at_step": 1, "fail_times": 10}, max_retries=2)
        job.retry_policy.non_retryable_kinds.append(F.FAILURE_KIND_USER_CODE)
        done = await stack.wait_terminal((await stack.create(job, job_id="det")).name)
        assert done.state == J.JOB_STATE_FAILED and len(done.attempts) == 1, "no retry spent on user code"
        assert done.failure.kind == F.FAILURE_KIND_USER_CODE and "non-retryable" in done.state_reason
        # A lost worker is still retried under the same policy.
        job = make_job(config={"steps": 2, "fail_at_step": 1, "fail_kind": "WORKER_LOST"}, max_retries=2)
        job.retry_policy.non_retryable_kinds.append(F.FAILURE_KIND_USER_CODE)
        done = await stack.wait_terminal((await stack.create(job, job_id="lost-worker")).name)
        assert done.state == J.JOB_STATE_SUCCEEDED
        assert [a.failure.kind for a in done.attempts] == [F.FAILURE_KIND_WORKER_LOST, F.FAILURE_KIND_UNSPECIFIED]


async def test_start_run_answered_internal_fails_the_attempt_as_a_trainer_error(stack_factory):
    async with stack_factory(cpus=1) as stack:
        job = make_job(config={"steps": 1, "start_error": "INTERNAL", "start_error_times": 1}, max_retries=1)
        done = await stack.wait_terminal((await stack.create(job, job_id="internal")).name)
        assert done.state == J.JOB_STATE_SUCCEEDED, done.state_reason
        first, second = done.attempts
        assert first.state == J.JOB_STATE_FAILED and not first.run
        assert first.failure.kind == F.FAILURE_KIND_TRAINER_ERROR and "INTERNAL" in first.failure.message
        assert stack.fake.job_start_calls[done.name] == 2, "asked once per attempt, not in a loop"
        assert second.run and stack.fake.runs_of(done.name)[0].state == R.RUN_STATE_SUCCEEDED
        # Without retries the job ends FAILED and gives its CPU back at once.
        job = make_job(config={"start_error": "UNKNOWN"})
        done = await stack.wait_terminal((await stack.create(job, job_id="unknown")).name)
        assert done.state == J.JOB_STATE_FAILED and done.failure.kind == F.FAILURE_KIND_TRAINER_ERROR
        assert stack.fake.job_start_calls[done.name] == 1
        reserved = await stack.app.redis.hgetall(keys.reserved())
        assert int(reserved[b"cpu_m"]) == 0


async def test_start_run_refused_as_invalid_fails_the_job_with_the_field(stack_factory):
    async with stack_factory() as stack:
        job = make_job(config={"start_error": "INVALID_ARGUMENT"}, max_retries=3)
        done = await stack.wait_terminal((await stack.create(job, job_id="refused")).name)
        assert done.state == J.JOB_STATE_FAILED and len(done.attempts) == 1, "a refusal spends no retry"
        assert done.failure.kind == F.FAILURE_KIND_TRAINER_ERROR
        assert "scripted INVALID_ARGUMENT" in done.failure.message


async def test_start_run_unavailable_is_asked_again_with_backoff_then_bounded(stack_factory):
    async with stack_factory(start_run_retry_s=30) as stack:
        job = make_job(config={"steps": 1, "start_error": "UNAVAILABLE", "start_error_times": 2})
        done = await stack.wait_terminal((await stack.create(job, job_id="flaky")).name)
        assert done.state == J.JOB_STATE_SUCCEEDED and len(done.attempts) == 1
        assert stack.fake.job_start_calls[done.name] == 3
    async with stack_factory(start_run_retry_s=0.8) as stack:
        job = make_job(config={"start_error": "UNAVAILABLE"})
        done = await stack.wait_terminal((await stack.create(job, job_id="down")).name)
        assert done.state == J.JOB_STATE_FAILED and done.failure.kind == F.FAILURE_KIND_TRAINER_ERROR
        # Backoff 0.5 s, 1 s, ...: a bounded few calls within 0.8 s, not one every 0.5 s forever.
        assert 2 <= stack.fake.job_start_calls[done.name] <= 3
        assert "UNAVAILABLE" in done.failure.message


async def test_timeout_stops_the_run_and_ends_timed_out(stack_factory):
    async with stack_factory() as stack:
        job = await stack.create(make_job(config={"hang": True, "step_s": 0.05}, timeout_s=1.0), job_id="slow")
        done = await stack.wait_terminal(job.name)
        assert done.state == J.JOB_STATE_TIMED_OUT
        assert "timeout" in done.state_reason
        assert done.failure.kind == F.FAILURE_KIND_TIMEOUT and done.attempts[0].failure.kind == F.FAILURE_KIND_TIMEOUT
        run = stack.fake.runs[done.attempts[0].run].run
        # Stopped by the scheduler or timed out by the trainer (both know the deadline): not left RUNNING.
        assert run.state in (R.RUN_STATE_STOPPED, R.RUN_STATE_TIMED_OUT), run_pb2.RunState.Name(run.state)


async def test_cancel_running_job_stops_its_run(stack_factory):
    async with stack_factory() as stack:
        job = await stack.create(make_job(config={"hang": True}), job_id="c")
        await _wait_state(stack, job.name, J.JOB_STATE_RUNNING)
        cancelled = (await stack.stub.CancelJob(js.CancelJobRequest(name=job.name, reason="user said so"))).job
        assert cancelled.state == J.JOB_STATE_CANCELLED and cancelled.state_reason == "user said so"
        run = cancelled.attempts[0].run
        assert stack.fake.stop_calls[run] >= 1 and stack.fake.runs[run].run.state == R.RUN_STATE_STOPPED
        assert cancelled.failure.kind == F.FAILURE_KIND_STOPPED and cancelled.failure.message == "user said so"


async def test_lost_run_is_retried(stack_factory):
    async with stack_factory() as stack:
        job = await stack.create(make_job(config={"steps": 4, "lose_at_step": 2}, max_retries=1), job_id="lost")
        done = await stack.wait_terminal(job.name)
        assert done.state == J.JOB_STATE_SUCCEEDED, done.state_reason
        assert "lost" in done.attempts[0].failure_reason
        assert done.attempts[0].failure.kind == F.FAILURE_KIND_TRAINER_ERROR


async def test_fractional_gpus_fill_one_card_exactly(stack_factory):
    async with stack_factory(cpus=8, gpus=1) as stack:
        for job_id, gpus in (("g1", 0.5), ("g2", 0.25), ("g3", 0.25), ("g4", 0.25)):
            await stack.create(make_job(cpus=0.5, gpus=gpus, config={"hang": True}), job_id=job_id)
        for name in ("jobs/g1", "jobs/g2", "jobs/g3"):
            await _wait_state(stack, name, J.JOB_STATE_RUNNING)
        await _full_passes(stack)
        assert (await stack.get("jobs/g4")).state == J.JOB_STATE_QUEUED
        assert stack.fake.max_concurrent_gpu == 1.0
        await stack.stub.CancelJob(js.CancelJobRequest(name="jobs/g2"))
        await _wait_state(stack, "jobs/g4", J.JOB_STATE_RUNNING)


async def test_priority_then_fifo_and_tenant_job_limit(stack_factory):
    from paddleray.services.scheduler.settings import TenantLimits

    async with stack_factory(cpus=1, tenant_limits={"greedy": TenantLimits(max_jobs=1)}) as stack:
        await stack.create(make_job(config={"hang": True}), job_id="blocker")
        await _wait_state(stack, "jobs/blocker", J.JOB_STATE_RUNNING)
        await stack.create(make_job(config={"steps": 1}), job_id="low")
        await stack.create(make_job(config={"steps": 1}, priority=10), job_id="high")
        # A pass decides on the queue as it read it: one that read only "low" and claims after
        # the blocker's CPU is free would start "low" first. Let passes that began after "high"
        # existed end (they find no room while the blocker runs). A fixed sleep lost that race.
        await _full_passes(stack)
        await stack.stub.CancelJob(js.CancelJobRequest(name="jobs/blocker"))
        high, low = await stack.wait_terminal("jobs/high"), await stack.wait_terminal("jobs/low")
        assert high.start_time.ToNanoseconds() < low.start_time.ToNanoseconds()
    async with stack_factory(cpus=8, tenant_limits={"greedy": TenantLimits(max_jobs=1)}) as stack:
        for i in range(3):
            await stack.create(make_job(tenant="greedy", config={"hang": True}), job_id=f"greedy-{i}")
        await stack.create(make_job(tenant="polite", config={"hang": True}), job_id="polite-0")
        await _wait_state(stack, "jobs/polite-0", J.JOB_STATE_RUNNING)
        await _full_passes(stack)
        states = [(await stack.get(f"jobs/greedy-{i}")).state for i in range(3)]
        assert states.count(J.JOB_STATE_RUNNING) == 1 and states.count(J.JOB_STATE_QUEUED) == 2


async def test_get_job_logs_proxies_the_runs_logs(stack_factory):
    async with stack_factory() as stack:
        job = await stack.create(make_job(config={"steps": 1}), job_id="logs")
        with pytest.raises(grpc.aio.AioRpcError) as not_started:
            async for _ in stack.stub.GetJobLogs(js.GetJobLogsRequest(name="jobs/nope")):
                pass
        assert not_started.value.code() == grpc.StatusCode.NOT_FOUND
        done = await stack.wait_terminal(job.name)
        lines = [line async for r in stack.stub.GetJobLogs(js.GetJobLogsRequest(name=job.name, tail_lines=2))
                 for line in r.lines]
        assert [line.text for line in lines] == [f"{done.attempts[0].run} line {i}" for i in (3, 4)]


async def _full_passes(stack, count: int = 2, timeout: float = 30) -> None:
    """Returns once `count` dispatcher passes began and ended after the call: each saw every job
    there was at the call, and decided on it. What a fixed sleep hoped for, under any load."""
    dispatcher = stack.app.dispatcher
    one_pass = dispatcher.dispatch_once  # a pass running now called it already: it is not counted
    done = 0

    async def counted() -> int:
        nonlocal done
        try:
            return await one_pass()
        finally:
            done += 1

    dispatcher.dispatch_once = counted
    try:
        async with asyncio.timeout(timeout):
            while done < count:
                await asyncio.sleep(0.02)
    finally:
        dispatcher.dispatch_once = one_pass


async def _wait_state(stack, name: str, state: int, timeout: float = 30) -> job_pb2.Job:
    async with asyncio.timeout(timeout):
        while True:
            job = await stack.get(name)
            if job.state == state:
                return job
            await asyncio.sleep(0.05)


async def test_a_stopped_replica_hands_its_running_jobs_over(stack_factory):
    async with stack_factory() as first:
        job = await first.create(make_job(config={"steps": 30, "step_s": 0.05}), job_id="handover")
        await _wait_state(first, job.name, J.JOB_STATE_RUNNING)
        await first.app.dispatcher.stop()
        # A clean stop expires the leases: a second replica takes the job over without waiting
        # for the lease TTL, and follows the same run to its end.
        async with stack_factory(fake=first.fake, lease_ttl_s=60) as second:
            done = await second.wait_terminal(job.name)
            assert done.state == J.JOB_STATE_SUCCEEDED
            assert first.fake.runs_created == {"handover-attempt-1": 1}
            assert done.latest_metrics.step == 30


async def test_a_retry_never_waits_past_the_jobs_timeout(stack_factory):
    async with stack_factory() as stack:
        job = make_job(config={"fail_at_step": 1, "fail_times": 10}, max_retries=5, timeout_s=1.0, backoff_s=600)
        created = await stack.create(job, job_id="late")
        # The backoff (10 minutes) outlasts the timeout: the job must end TIMED_OUT at its
        # deadline instead of sitting in RETRYING until the backoff ends.
        done = await stack.wait_terminal(created.name, timeout=60)
        assert done.state == J.JOB_STATE_TIMED_OUT
        assert [a.state for a in done.attempts] == [J.JOB_STATE_FAILED]


async def test_backfill_cannot_starve_a_big_job(stack_factory):
    async with stack_factory(cpus=2, max_backfill_wait_s=0.3) as stack:
        await stack.create(make_job(cpus=1, config={"hang": True}), job_id="small-running")
        await _wait_state(stack, "jobs/small-running", J.JOB_STATE_RUNNING)
        await stack.create(make_job(cpus=2, config={"hang": True}), job_id="big")
        await asyncio.sleep(0.6)  # the big job has now waited past max_backfill_wait_s
        await stack.create(make_job(cpus=1, config={"hang": True}), job_id="small-late")
        await _full_passes(stack)
        # One CPU is free, but the late small job must leave it for the big one.
        assert (await stack.get("jobs/small-late")).state == J.JOB_STATE_QUEUED
        await stack.stub.CancelJob(js.CancelJobRequest(name="jobs/small-running"))
        await _wait_state(stack, "jobs/big", J.JOB_STATE_RUNNING)
        assert (await stack.get("jobs/small-late")).state == J.JOB_STATE_QUEUED


async def test_jobs_that_can_never_fit_neither_starve_nor_fill_the_window(stack_factory):
    """A job larger than the empty cluster once blocked every smaller job after waiting
    max_backfill_wait_s, and a window's worth of them starved everything behind them."""
    async with stack_factory(cpus=2, max_backfill_wait_s=0.1, dispatch_window=2) as stack:
        for i in range(3):
            await stack.create(make_job(cpus=4, workers=16, priority=10), job_id=f"huge-{i}")
        await asyncio.sleep(0.3)  # they have waited past max_backfill_wait_s
        await stack.create(make_job(cpus=1, config={"hang": True}), job_id="small")
        await _wait_state(stack, "jobs/small", J.JOB_STATE_RUNNING)
        huge = await stack.get("jobs/huge-0")
        assert huge.state == J.JOB_STATE_QUEUED
        assert huge.state_reason == "needs 64 CPUs; the cluster has 2"


async def test_backfill_starts_small_jobs_while_a_big_one_has_not_waited_long(stack_factory):
    async with stack_factory(cpus=2) as stack:
        await stack.create(make_job(cpus=1, config={"hang": True}), job_id="small-running")
        await _wait_state(stack, "jobs/small-running", J.JOB_STATE_RUNNING)
        await stack.create(make_job(cpus=2, config={"hang": True}), job_id="big")
        await stack.create(make_job(cpus=1, config={"hang": True}), job_id="small-late")
        await _wait_state(stack, "jobs/small-late", J.JOB_STATE_RUNNING)
        assert (await stack.get("jobs/big")).state == J.JOB_STATE_QUEUED


async def test_memory_and_tenant_gpu_limits_hold_jobs_back(stack_factory):
    from paddleray.services.scheduler.settings import TenantLimits
    from support.fake_trainer import FakeTrainer

    fake = FakeTrainer(cpus=8, gpus=2, memory=4 << 30)
    async with stack_factory(fake=fake, tenant_limits={"vision": TenantLimits(max_gpus=0.5)}) as stack:
        for i in range(2):
            job = make_job(cpus=1, config={"hang": True})
            job.spec.resources_per_worker.memory_bytes = 3 << 30
            await stack.create(job, job_id=f"mem-{i}")
            await stack.create(make_job(cpus=1, gpus=0.5, tenant="vision", config={"hang": True}), job_id=f"gpu-{i}")
        await _wait_state(stack, "jobs/mem-0", J.JOB_STATE_RUNNING)
        await _wait_state(stack, "jobs/gpu-0", J.JOB_STATE_RUNNING)
        await _full_passes(stack)
        # 3 GiB + 3 GiB exceed the 4 GiB cluster; the tenant may hold half a GPU, though two are free.
        assert (await stack.get("jobs/mem-1")).state == J.JOB_STATE_QUEUED
        assert (await stack.get("jobs/gpu-1")).state == J.JOB_STATE_QUEUED
        await stack.stub.CancelJob(js.CancelJobRequest(name="jobs/gpu-0"))
        await _wait_state(stack, "jobs/gpu-1", J.JOB_STATE_RUNNING)


async def test_get_job_logs_passes_the_trainers_refusals_through(stack_factory):
    """A bad rank is the caller's mistake (INVALID_ARGUMENT from the trainer), not an outage."""
    async with stack_factory() as stack:
        job = await stack.create(make_job(config={"steps": 1}), job_id="bad-rank")
        await stack.wait_terminal(job.name)
        with pytest.raises(grpc.aio.AioRpcError) as bad_rank:
            async for _ in stack.stub.GetJobLogs(js.GetJobLogsRequest(name=job.name, rank=5)):
                pass
        assert bad_rank.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert bad_rank.value.details().startswith("rank:")
        stack.fake.runs.clear()  # the trainer forgot the run (a new storage root, say)
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            async for _ in stack.stub.GetJobLogs(js.GetJobLogsRequest(name=job.name)):
                pass
        assert gone.value.code() == grpc.StatusCode.NOT_FOUND
