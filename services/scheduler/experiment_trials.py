"""A sweep's trials: handing them out, creating their jobs, and driving the sweep from the jobs'
callbacks (the best value and checkpoint, ASHA's early stops, a slot freed by a trial's end).

Trials are handed out by index through one Lua claim (claim_trial) that checks the experiment
still runs and a max_concurrent_trials slot is free, and the trial job gets an id derived from
the index, so creating it is idempotent: a replica that crashed between the claim and the job,
or two replicas filling at once, can only ever produce one job per index (the job store refuses
a second job with the same id).

Job callbacks drive the sweep: on_metrics keeps each trial's best value and asks ASHA; a
terminal trial frees its slot and the next ones are created. Callbacks are at most once and a
crashed replica never makes them: ExperimentManager.reconcile (experiments.py) makes up for them.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import math
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import experiment_pb2, job_pb2
from paddleray.services.common import errors, identity, names
from paddleray.services.common.logs import log_context
from paddleray.services.scheduler import asha, keys, search
from paddleray.services.scheduler.experiment_store import ExperimentRecord, ExperimentStore
from paddleray.services.scheduler.experiment_validation import MAX_DISPLAY_NAME
from paddleray.services.scheduler.jobs import JobManager
from paddleray.services.scheduler.store import now_ms

log = logging.getLogger(__name__)

E = experiment_pb2.ExperimentState


def trial_job_prefix(experiment_id: str) -> str:
    """Trial job ids are this prefix plus the trial index; they fit the 63-character job id."""
    if len(experiment_id) <= 57:  # room for "-t9999"
        return f"{experiment_id}-t"
    digest = hashlib.sha1(experiment_id.encode()).hexdigest()[:8]
    return f"{experiment_id[:48]}-{digest}-t"


@dataclass(frozen=True)
class _Ranking:
    """What on_metrics needs of an experiment; fixed at creation, so cached per process."""

    metric: str
    sign: int
    asha: asha.AshaConfig | None


@dataclass(frozen=True)
class _Trial:
    experiment_id: str
    index: int
    ranking: _Ranking
    value: float | None  # sign * the metric (larger is better), None when not reported


class ExperimentTrials:
    """The trials of ExperimentManager's sweeps, and the background tasks that stop them."""

    jobs: JobManager
    store: ExperimentStore
    _rankings: dict[str, _Ranking]
    _stopping: set[str]
    _tasks: set[asyncio.Task]

    # -- trials -----------------------------------------------------------------------------

    async def fill(self, experiment_id: str) -> None:
        """Creates trials while slots are free, then ends the experiment if nothing is left."""
        record = await self.store.get(experiment_id)
        if record is None:
            return
        prefix = trial_job_prefix(experiment_id)
        while (index := await self.store.claim_trial(experiment_id, prefix)) >= 0:
            await self._create_trial(record, index)
        await self._finish_if_done(experiment_id)

    async def _create_trial(self, record: ExperimentRecord, index: int) -> None:
        experiment_id = record.experiment_id
        experiment = record.experiment
        parameters = await self.store.plan_entry(experiment_id, index)
        job = job_pb2.Job()
        job.CopyFrom(experiment.trial_template)
        job.spec.config.CopyFrom(search.apply_to_config(experiment.trial_template.spec.config, parameters))
        job.labels.update(experiment.labels)
        job.display_name = f"{experiment.display_name or experiment_id} trial {index}"[:MAX_DISPLAY_NAME]
        job_id = f"{trial_job_prefix(experiment_id)}{index}"
        try:
            # The scheduler creates the trial, often outside any call (a trial ending frees a slot):
            # it acts as LOCAL, an admin. The template was checked with its creator's rights at
            # CreateExperiment (create above), and the trial keeps the template's tenant.
            await self.jobs.create_trial(
                job, experiment.name, search.to_trial_parameters(parameters), job_id=job_id,
                request_id=f"{experiment.name}/trials/{index}", caller=identity.LOCAL,
            )
        except errors.AlreadyExists:
            existing = await self.jobs.find(job_id)
            if existing is None or existing.experiment != experiment.name:
                # Someone's own job took the id: this trial cannot run under it; give the slot back.
                log.error("trial %d of %s: job id %s is taken by another job", index, experiment.name, job_id)
                await self.store.disown_trial(experiment_id, index, job_id)
                return
        await self.store.record_trial(experiment_id, index, job_id)
        # A cancel that ran while this job was being created did not see it.
        current = await self.store.get(experiment_id)
        if current is not None and current.state == E.EXPERIMENT_STATE_CANCELLED:
            self._cancel_job(names.JOB.format(job=job_id), current.experiment.state_reason)

    async def _finish_if_done(self, experiment_id: str) -> None:
        status, state = await self.store.end(experiment_id, "finish", now_ms())
        if status == "ended":
            log.info("experiment experiments/%s ended %s", experiment_id, E.Name(state))

    # -- job callbacks ------------------------------------------------------------------------

    async def on_metrics(self, job_name: str, attempt: int, report: common_pb2.MetricsReport) -> None:
        trial = await self._trial_of(job_name, report.metrics)
        if trial is None:
            return
        experiment_id, index, ranking = trial.experiment_id, trial.index, trial.ranking
        if trial.value is not None:
            await self.store.offer_value(experiment_id, index, trial.value)
        if ranking.asha is None:
            return
        decision = await self._asha_state(experiment_id, ranking.asha).on_report(str(index), report)
        if decision.stop:
            if job_name not in self._stopping:
                with log_context(experiment=experiment_id, trial=index):
                    log.info("stopping %s early: %s", job_name, decision.reason)
            self._stop_early(job_name, decision.reason)

    async def on_checkpoint(self, job_name: str, attempt: int, checkpoint: common_pb2.Checkpoint) -> None:
        """Keeps the trial's best checkpoint by the experiment's metric, so that reading the
        experiment never replays the trial's events."""
        trial = await self._trial_of(job_name, checkpoint.metrics)
        if trial is not None and trial.value is not None:
            await self.store.offer_checkpoint(trial.experiment_id, trial.index, trial.value, checkpoint)

    async def on_terminal(self, job_name: str, state: int) -> None:
        owner = await self.store.owner_of(names.JOB.parse_one(job_name))
        if owner is None:
            return
        experiment_id, index = owner
        if await self.store.release_trial(experiment_id, index):
            with log_context(experiment=experiment_id, trial=index):
                log.info("trial %s ended %s", job_name, job_pb2.JobState.Name(state))
        await self.fill(experiment_id)

    def _stop_early(self, job_name: str, reason: str) -> None:
        self._stop(job_name, self.jobs.stop_early, reason)

    def _cancel_job(self, job_name: str, reason: str) -> None:
        # The sweep's own work: CancelExperiment checked its caller's rights.
        self._stop(job_name, functools.partial(self.jobs.cancel, caller=identity.LOCAL), reason)

    def _stop(self, job_name: str, stop, reason: str) -> None:
        # Not awaited: stopping waits for the run to end, which the caller (the dispatcher,
        # inside its metrics callback) may be the one to observe. One stop per job at a time.
        if job_name in self._stopping:
            return
        self._stopping.add(job_name)
        task = self._spawn(stop(job_name, reason))
        task.add_done_callback(lambda _: self._stopping.discard(job_name))

    async def _trial_of(self, job_name: str, metrics: Mapping[str, float]) -> _Trial | None:
        """The trial the job is, with the sweep's metric as found in `metrics`; None for a job
        that is not a trial of a live sweep."""
        owner = await self.store.owner_of(names.JOB.parse_one(job_name))
        if owner is None:
            return None
        experiment_id, index = owner
        ranking = await self._ranking(experiment_id)
        if ranking is None:
            return None
        value = metrics.get(ranking.metric)
        signed = ranking.sign * value if value is not None and not math.isnan(value) else None
        return _Trial(experiment_id, index, ranking, signed)

    async def _ranking(self, experiment_id: str) -> _Ranking | None:
        ranking = self._rankings.get(experiment_id)
        if ranking is None:
            record = await self.store.get(experiment_id)
            if record is None:
                return None
            experiment = record.experiment
            ranking = _Ranking(experiment.metric, _sign(experiment.mode), asha.config_from_proto(experiment))
            self._rankings[experiment_id] = ranking
        return ranking

    def _asha_state(self, experiment_id: str, config: asha.AshaConfig) -> asha.AshaState:
        return asha.AshaState(self.store.redis, keys.asha_rungs(experiment_id), keys.asha_stopped(experiment_id), config)

    def _spawn(self, coro: Coroutine) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("experiment background task failed", exc_info=task.exception())


def _sign(mode: int) -> int:
    return -1 if mode == common_pb2.METRIC_MODE_MIN else 1
