"""How a followed attempt ends: SUCCEEDED, RETRYING with backoff (resuming from the newest
checkpoint), FAILED, or the state a stop asked for (CANCELLED, EARLY_STOPPED, TIMED_OUT), and
the job's timeout (deadline_s).

Every write names this replica as owner (JobManager.transition with `owner`), so a follower
whose lease was taken over can change nothing (LeaseLost) and just ends. RunFollower
(follower.py) is built on AttemptEnding.
"""

from __future__ import annotations

import time

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2
from paddleray.services.scheduler import metrics
from paddleray.services.scheduler.job_states import ACTIVE_STATES, STOP_INTENTS, now_ts
from paddleray.services.scheduler.jobs import JobManager
from paddleray.services.scheduler.store import JobRecord, JobStore, now_ms
from paddleray.trainer.v1 import run_pb2

J = job_pb2.JobState
F = common_pb2.FailureKind


class _Gone(Exception):
    """The job is no longer this follower's to drive (ended, deleted or taken over)."""


def backoff_s(policy, retry_number: int) -> float:
    """Wait before retry `retry_number` (1-based): initial * multiplier^(n-1), capped."""
    initial = policy.initial_backoff.ToNanoseconds() / 1e9 if policy.HasField("initial_backoff") else 1.0
    cap = policy.max_backoff.ToNanoseconds() / 1e9 if policy.HasField("max_backoff") else 300.0
    multiplier = policy.backoff_multiplier or 2.0
    return min(cap, initial * multiplier ** (retry_number - 1))


def failure(kind: common_pb2.FailureKind, message: str) -> common_pb2.Failure:
    return common_pb2.Failure(kind=kind, message=message)


def run_failure(change: run_pb2.RunStateChange, kind: common_pb2.FailureKind) -> common_pb2.Failure:
    """What the trainer said ended the run; `kind` when it said nothing (an older trainer)."""
    if change.HasField("failure"):
        return change.failure
    return failure(kind, change.reason)


def deadline_s(job: job_pb2.Job) -> float | None:
    """Epoch seconds when the job times out (its timeout counts from its first start)."""
    if not job.HasField("timeout") or not job.HasField("start_time"):
        return None
    return job.start_time.ToNanoseconds() / 1e9 + job.timeout.ToNanoseconds() / 1e9


class AttemptEnding:
    """Ends the attempt of a job this replica follows; _mine reads the job while it is still ours."""

    manager: JobManager
    store: JobStore
    owner: str

    async def _mine(self, job_id: str) -> JobRecord:
        record = await self.store.get(job_id)
        if record is None or record.owner != self.owner or record.job.state not in ACTIVE_STATES:
            raise _Gone
        return record

    async def _run_lost(self, job_id: str, run: str) -> None:
        record = await self._mine(job_id)
        if record.stop_intent:
            await self._end(record, STOP_INTENTS[record.stop_intent], record.stop_reason)
        else:
            reason = f"the trainer lost {run}"
            await self._failed(record, reason, failure(F.FAILURE_KIND_TRAINER_ERROR, reason))

    async def _failed(self, record: JobRecord, reason: str, cause: common_pb2.Failure,
                      fields: dict | None = None) -> None:
        """Ends the attempt as failed: RETRYING while the retry policy has retries for the
        failure's kind and the deadline allows, else FAILED."""
        job = record.job
        retries_used = len(job.attempts) - 1
        deadline = deadline_s(job)
        retryable = cause.kind not in job.retry_policy.non_retryable_kinds
        if retryable and retries_used < job.retry_policy.max_retries and (deadline is None or time.time() < deadline):
            wait = backoff_s(job.retry_policy, retries_used + 1)

            def retrying(j: job_pb2.Job) -> None:
                j.attempts[-1].state = J.JOB_STATE_FAILED
                j.attempts[-1].failure_reason = reason
                j.attempts[-1].failure.CopyFrom(cause)
                j.attempts[-1].end_time.CopyFrom(now_ts())

            # Never wait past the deadline: the dispatcher then ends the job TIMED_OUT on time.
            due_ms = now_ms() + int(wait * 1000)
            if deadline is not None:
                due_ms = min(due_ms, int(deadline * 1000))
            await self._transition(record, J.JOB_STATE_RETRYING, f"attempt failed: {reason}; retry in {wait:.1f}s",
                                   retrying, fields, delay_until_ms=due_ms)
            metrics.RETRIES.inc()
            return

        def failed(j: job_pb2.Job) -> None:
            j.attempts[-1].failure_reason = reason

        if not retryable and retries_used < job.retry_policy.max_retries:
            reason = f"{reason} (not retried: {common_pb2.FailureKind.Name(cause.kind)} is non-retryable)"
        await self._transition(record, J.JOB_STATE_FAILED, reason, failed, fields, failure=cause)

    async def _end(self, record: JobRecord, state: job_pb2.JobState, reason: str, fields: dict | None = None,
                   failure: common_pb2.Failure | None = None) -> None:
        if state == J.JOB_STATE_TIMED_OUT:
            metrics.TIMEOUTS.inc()
        await self._transition(record, state, reason, None, fields, failure=failure)

    async def _transition(self, record, state, reason, mutate, fields, delay_until_ms=None, failure=None) -> None:
        await self.manager.transition(record.job_id, state, reason, mutate=mutate, owner=self.owner, fields=fields,
                                      delay_until_ms=delay_until_ms, expect=ACTIVE_STATES, failure=failure)
