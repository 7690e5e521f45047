"""The terminal states of the contracts' state machines, in one place each.

A job (scheduler.v1.JobState), a run (trainer.v1.RunState), an experiment
(scheduler.v1.ExperimentState) or a model version (exporter.v1.ModelVersionState) in one of
these states never changes state again. Services, clients and tests ask here rather than
keeping their own sets; the trainer's domain RunState (records.py) derives its set from
RUN_TERMINAL.
"""

from __future__ import annotations

from paddleray.exporter.v1 import model_pb2
from paddleray.scheduler.v1 import experiment_pb2, job_pb2
from paddleray.trainer.v1 import run_pb2

J = job_pb2.JobState
R = run_pb2.RunState
E = experiment_pb2.ExperimentState
V = model_pb2.ModelVersionState

JOB_TERMINAL: frozenset[job_pb2.JobState] = frozenset({
    J.JOB_STATE_SUCCEEDED, J.JOB_STATE_FAILED, J.JOB_STATE_CANCELLED, J.JOB_STATE_TIMED_OUT,
    J.JOB_STATE_EARLY_STOPPED,
})
RUN_TERMINAL: frozenset[run_pb2.RunState] = frozenset({
    R.RUN_STATE_SUCCEEDED, R.RUN_STATE_FAILED, R.RUN_STATE_STOPPED, R.RUN_STATE_TIMED_OUT,
})
EXPERIMENT_TERMINAL: frozenset[experiment_pb2.ExperimentState] = frozenset({
    E.EXPERIMENT_STATE_SUCCEEDED, E.EXPERIMENT_STATE_FAILED, E.EXPERIMENT_STATE_CANCELLED,
})
MODEL_VERSION_TERMINAL: frozenset[model_pb2.ModelVersionState] = frozenset({
    V.MODEL_VERSION_STATE_READY, V.MODEL_VERSION_STATE_VALIDATION_FAILED, V.MODEL_VERSION_STATE_FAILED,
})
