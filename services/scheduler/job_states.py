"""The job state machine's rules: which moves between states are ALLOWED, which states wait,
hold resources or end a job, and the errors and event a move makes.

JobManager (jobs.py, its transitions in job_transitions.py) applies them; the dispatcher and the
follower read them to know what a state means.
"""

from __future__ import annotations

import time

from google.protobuf import timestamp_pb2

from paddleray.scheduler.v1 import job_pb2
from paddleray.services.common import errors, states

J = job_pb2.JobState
ALLOWED: dict[int, frozenset[int]] = {
    J.JOB_STATE_QUEUED: frozenset({J.JOB_STATE_STARTING, J.JOB_STATE_CANCELLED, J.JOB_STATE_EARLY_STOPPED}),
    J.JOB_STATE_STARTING: frozenset({
        J.JOB_STATE_RUNNING, J.JOB_STATE_SUCCEEDED, J.JOB_STATE_FAILED, J.JOB_STATE_RETRYING,
        J.JOB_STATE_CANCELLED, J.JOB_STATE_TIMED_OUT, J.JOB_STATE_EARLY_STOPPED,
    }),
    J.JOB_STATE_RUNNING: frozenset({
        J.JOB_STATE_SUCCEEDED, J.JOB_STATE_FAILED, J.JOB_STATE_RETRYING, J.JOB_STATE_CANCELLED,
        J.JOB_STATE_TIMED_OUT, J.JOB_STATE_EARLY_STOPPED,
    }),
    J.JOB_STATE_RETRYING: frozenset({
        J.JOB_STATE_STARTING, J.JOB_STATE_FAILED, J.JOB_STATE_CANCELLED, J.JOB_STATE_TIMED_OUT,
        J.JOB_STATE_EARLY_STOPPED,
    }),
}
# States that hold reserved cluster resources and a dispatch lease.
ACTIVE_STATES = frozenset({J.JOB_STATE_STARTING, J.JOB_STATE_RUNNING})
WAITING_STATES = frozenset({J.JOB_STATE_QUEUED, J.JOB_STATE_RETRYING})
STOP_INTENTS = {"cancel": J.JOB_STATE_CANCELLED, "early_stop": J.JOB_STATE_EARLY_STOPPED,
                "timeout": J.JOB_STATE_TIMED_OUT}


class IllegalTransition(errors.FailedPrecondition):
    def __init__(self, job_name: str, from_state: int, to_state: int) -> None:
        super().__init__(f"{job_name}: cannot go from {J.Name(from_state)} to {J.Name(to_state)}")


class LeaseLost(Exception):
    """Another replica took the job over; this one must stop acting for it."""


def is_terminal(state: int) -> bool:
    return state in states.JOB_TERMINAL


def now_ts() -> timestamp_pb2.Timestamp:
    # FromNanoseconds: GetCurrentTime goes through datetime and costs several times more.
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(time.time_ns())
    return ts


def state_event(from_state: job_pb2.JobState, to_state: job_pb2.JobState, reason: str,
                attempt: int) -> job_pb2.JobEvent:
    return job_pb2.JobEvent(
        time=now_ts(), attempt=attempt,
        state_change=job_pb2.JobStateChange(from_state=from_state, to_state=to_state, reason=reason),
    )
