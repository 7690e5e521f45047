"""Experiments as a domain: ExperimentManager, a sweep's lifecycle: create, read, cancel, delete, reconcile.

CreateExperiment stores the experiment and its whole plan (every trial's parameters) durably
before anything runs; its trials are then handed out and created, and the jobs' callbacks drive
the sweep, as experiment_trials.py says (ExperimentTrials, which ExperimentManager is built on).
Callbacks are at most once and a crashed replica never makes them, so `reconcile` (at start and
then periodically) re-derives everything from Redis: unfinished creates, terminal trials still
holding a slot, ASHA stops not yet carried out, cancelled experiments with live trials.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from paddleray.scheduler.v1 import experiment_pb2
from paddleray.services.common import errors, idempotency, identity, names, paging
from paddleray.services.scheduler import tenancy
from paddleray.services.scheduler.experiment_store import ExperimentRecord, ExperimentStore
from paddleray.services.scheduler.experiment_trials import ExperimentTrials, _Ranking, _sign
from paddleray.services.scheduler.experiment_validation import validate_experiment
from paddleray.services.scheduler.hooks import JobHooks
from paddleray.services.scheduler.job_states import is_terminal, now_ts
from paddleray.services.scheduler.jobs import JobManager
from paddleray.services.scheduler.store import now_ms

log = logging.getLogger(__name__)

_STOP_WAIT_S = 5.0

E = experiment_pb2.ExperimentState


class ExperimentManager(ExperimentTrials):
    def __init__(self, jobs: JobManager, store: ExperimentStore, reconcile_interval_s: float = 5.0) -> None:
        self.jobs = jobs
        self.store = store
        self.reconcile_interval_s = reconcile_interval_s
        self._rankings: dict[str, _Ranking] = {}
        self._tasks: set[asyncio.Task] = set()
        self._stopping: set[str] = set()
        self._loop_task: asyncio.Task | None = None
        self._shutting_down = False

    def register(self, hooks: JobHooks) -> None:
        hooks.on_metrics(self.on_metrics)
        hooks.on_checkpoint(self.on_checkpoint)
        hooks.on_terminal(self.on_terminal)

    # -- create ---------------------------------------------------------------------------

    async def create(
        self, experiment: experiment_pb2.Experiment | None, experiment_id: str = "", request_id: str = "", *,
        caller: identity.Identity,
    ) -> experiment_pb2.Experiment:
        """Validates, expands the plan, stores both durably, then starts the first trials. The
        template is checked with caller's rights, its tenant is caller's (an admin may name
        another); the trials are created as LOCAL (_create_trial)."""
        tenant = tenancy.prepare_experiment(caller, experiment)
        if experiment is None:
            raise errors.InvalidArgument("experiment", "required")
        if experiment_id:  # the same form as job ids: trial job ids are derived from it
            names.check_id(experiment_id, "experiment_id")
        idempotency.check_request_id(request_id)
        # A plan of 10,000 trials takes seconds to expand and check: off the event loop.
        plan = await asyncio.to_thread(validate_experiment, experiment)
        # The template's package and init_from, checked as CreateJob will check every trial's.
        await self.jobs.prepare_spec(experiment.trial_template.spec, "experiment.trial_template.spec", caller=caller)
        stored = experiment_pb2.Experiment()
        stored.CopyFrom(experiment)
        for output_only in ("state", "state_reason", "trials_by_state", "best_trial", "end_time"):
            stored.ClearField(output_only)
        fingerprint = idempotency.fingerprint(stored, experiment_id)
        stored.name = names.EXPERIMENT.format(experiment=experiment_id or f"exp-{uuid.uuid4().hex[:12]}")
        stored.create_time.CopyFrom(now_ts())
        stored.total_trials = len(plan)
        status, found_id, first = await self.store.create(stored, plan, request_id, fingerprint)
        if status == "exists":
            raise errors.AlreadyExists(f"{stored.name} already exists")
        if status == "duplicate":
            idempotency.check_repeat(first, fingerprint)
        if status == "created":
            log.info("experiment %s created with %d trials", stored.name, len(plan))
            await self.fill(found_id)
        created = await self._get(names.EXPERIMENT.format(experiment=found_id))
        tenancy.check_created(tenant, tenancy.experiment_tenant(created))
        return created

    # -- read -----------------------------------------------------------------------------

    async def get(self, name: str, *, caller: identity.Identity) -> experiment_pb2.Experiment:
        """The experiment, or NOT_FOUND (as for a missing one) when caller may not see its tenant."""
        experiment = await self._get(name)
        identity.check_visible(caller, tenancy.experiment_tenant(experiment), name)
        return experiment

    async def _get(self, name: str) -> experiment_pb2.Experiment:
        record = await self._record(name)
        await self._add_progress(record)
        return record.experiment

    async def list(self, page_size: int, page_token: str, states, *,
                   caller: identity.Identity) -> tuple[list[experiment_pb2.Experiment], str]:
        size = paging.page_size(page_size)
        for i, state in enumerate(states):
            if state not in E.values() or state == E.EXPERIMENT_STATE_UNSPECIFIED:
                raise errors.InvalidArgument(f"states[{i}]", f"unknown experiment state {state}")
        filters = {"states": list(states)}
        after = paging.decode_page_token(page_token, filters, "ListExperiments")
        records, last = await self.store.list(size, after, set(states))
        for record in records:
            await self._add_progress(record)
        shown = tenancy.visible_experiments(caller, [r.experiment for r in records])
        return shown, paging.encode_page_token(last, filters) if last else ""

    async def _record(self, name: str) -> ExperimentRecord:
        record = await self.store.get(names.EXPERIMENT.parse_one(name))
        if record is None:
            raise errors.NotFound(f"{name} not found")
        return record

    async def _add_progress(self, record: ExperimentRecord) -> None:
        """Fills trials_by_state (from the trial jobs) and best_trial."""
        experiment_id = record.experiment_id
        trials = await self.store.trials(experiment_id)
        indexes = sorted(trials)
        jobs = dict(zip(indexes, await self.jobs.find_many([trials[i] for i in indexes]), strict=True))
        counts: dict[int, int] = {}
        for job in jobs.values():
            if job is not None:
                counts[job.state] = counts.get(job.state, 0) + 1
        experiment = record.experiment
        del experiment.trials_by_state[:]
        for state in sorted(counts):
            experiment.trials_by_state.add(state=state, count=counts[state])
        values = await self.store.best_values(experiment_id)
        if not values:
            return
        # Ties go to the earlier trial, so the answer does not change as later trials tie it.
        best_index = max(values, key=lambda i: (values[i], -i))
        best = experiment.best_trial
        best.metric_value = _sign(experiment.mode) * values[best_index]
        best.parameters.update(await self.store.plan_entry(experiment_id, best_index))
        best_job = jobs.get(best_index)
        if best_job is not None:
            best.job = best_job.name
            # The trial's checkpoint with the best metric (kept as reported), else its newest.
            checkpoint = await self.store.best_checkpoint(experiment_id, best_index)
            if checkpoint is not None:
                best.checkpoint.CopyFrom(checkpoint)
            elif best_job.HasField("latest_checkpoint"):
                best.checkpoint.CopyFrom(best_job.latest_checkpoint)
    # -- cancel / delete ----------------------------------------------------------------------

    async def cancel(self, name: str, reason: str = "", *, caller: identity.Identity) -> experiment_pb2.Experiment:
        """Ends the experiment CANCELLED and cancels its unfinished trials (in the background:
        a running trial ends once its run has stopped). A finished experiment is unchanged."""
        identity.require_write(caller, "CancelExperiment")
        await self.get(name, caller=caller)
        experiment_id = names.EXPERIMENT.parse_one(name)
        status, _ = await self.store.end(experiment_id, "cancel", now_ms(), reason or "cancelled by request")
        if status == "missing":
            raise errors.NotFound(f"{name} not found")
        await self._cancel_trials(experiment_id)
        return await self._get(name)

    async def _cancel_trials(self, experiment_id: str) -> None:
        record = await self.store.get(experiment_id)
        if record is None or record.state != E.EXPERIMENT_STATE_CANCELLED:
            return
        trials = await self.store.trials(experiment_id)
        for index in await self.store.active(experiment_id):
            job_id = trials.get(index)
            if job_id is None:
                # Handed out but never created (a crash in between): nothing to cancel.
                await self.store.release_trial(experiment_id, index)
                continue
            job = await self.jobs.find(job_id)
            if job is None or is_terminal(job.state):
                await self.store.release_trial(experiment_id, index)
            else:
                self._cancel_job(job.name, record.experiment.state_reason)

    async def delete(self, name: str, *, caller: identity.Identity) -> None:
        identity.require_write(caller, "DeleteExperiment")
        await self.get(name, caller=caller)
        record = await self._record(name)
        if record.state == E.EXPERIMENT_STATE_RUNNING:
            raise errors.FailedPrecondition(f"{name} is running; cancel it first")
        trials = await self.store.trials(record.experiment_id)
        job_ids = list(trials.values())
        for job in await self.jobs.find_many(job_ids):
            if job is not None and not is_terminal(job.state):
                raise errors.FailedPrecondition(f"{name}: trial {job.name} is still stopping")
        for job_id in job_ids:  # the experiment's own trials: its caller's rights were checked above
            try:
                await self.jobs.delete(names.JOB.format(job=job_id), caller=identity.LOCAL)
            except errors.NotFound:
                pass
        await self.store.delete(record, job_ids)
        self._rankings.pop(record.experiment_id, None)

    # -- recovery -------------------------------------------------------------------------

    async def reconcile(self) -> None:
        """Catches up with whatever callbacks were missed (a crash, another replica's work)."""
        for experiment_id in await self.store.ids_in_state(E.EXPERIMENT_STATE_RUNNING):
            try:
                await self._reconcile_running(experiment_id)
            except Exception:  # noqa: BLE001 - one broken experiment must not stall the others
                log.exception("reconciling experiments/%s failed", experiment_id)
        for experiment_id in await self.store.ids_in_state(E.EXPERIMENT_STATE_CANCELLED):
            if await self.store.active(experiment_id):
                await self._cancel_trials(experiment_id)

    async def _reconcile_running(self, experiment_id: str) -> None:
        record = await self.store.get(experiment_id)
        if record is None:
            return
        trials = await self.store.trials(experiment_id)
        stopped = await self.store.asha_stopped(experiment_id)
        for index in sorted(await self.store.active(experiment_id)):
            job_id = trials.get(index)
            if job_id is None:
                await self._create_trial(record, index)
                continue
            job = await self.jobs.find(job_id)
            if job is None or is_terminal(job.state):
                await self.store.release_trial(experiment_id, index)
            elif str(index) in stopped:
                self._stop_early(job.name, stopped[str(index)])
            else:
                # Callbacks a crashed replica never made: the newest report stands for them.
                if job.HasField("latest_metrics"):
                    await self.on_metrics(job.name, 0, job.latest_metrics)
                if job.HasField("latest_checkpoint"):
                    await self.on_checkpoint(job.name, 0, job.latest_checkpoint)
        await self.fill(experiment_id)

    def start(self) -> None:
        """Reconciles at once (this may be a restart), then every reconcile_interval_s."""
        self._loop_task = asyncio.get_running_loop().create_task(self._reconcile_loop())

    async def _reconcile_loop(self) -> None:
        # A flag, not only cancellation: redis-py and grpc.aio can swallow a task's cancellation
        # inside a call, and the loop would then go on after stop().
        while not self._shutting_down:
            try:
                await self.reconcile()
            except Exception:  # noqa: BLE001 - a Redis blip must not end the loop
                log.exception("experiment reconcile failed")
            await asyncio.sleep(self.reconcile_interval_s)

    async def stop(self) -> None:
        self._shutting_down = True
        tasks = [*self._tasks, *([self._loop_task] if self._loop_task else [])]
        for task in tasks:
            task.cancel()
        if tasks:
            # Bounded for the same reason: a task whose cancellation was swallowed must not hang shutdown.
            await asyncio.wait(tasks, timeout=_STOP_WAIT_S)
