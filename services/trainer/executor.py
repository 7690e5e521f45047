"""RunExecutor: drives one run from PENDING to its end on a worker group.

It owns the run's lifecycle and tells two kinds of failure apart, as Ray Train's executor
does: user code that raised (FAILED with the rank and the traceback's summary) and a worker
that died (actor crash, OOM kill, node loss: FAILED with the rank and Ray's cause). Either
way the whole group is killed at once, so no other rank waits in a collective. A stop
(StopRun or the timeout) asks every rank to stop through ctx.should_stop() and kills the
group when the grace period ends first.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import ray

from paddleray.services.common import names
from paddleray.services.common.checkpoints import CheckpointInfo, checkpoint_store
from paddleray.services.common.ray_connection import in_daemon_thread
from paddleray.services.trainer import metrics, placement, runs
from paddleray.services.trainer.backend import PaddleBackendConfig
from paddleray.services.trainer.context import ContextSpec, Report, RunPaths
from paddleray.services.trainer.pool import WorkerPool
from paddleray.services.trainer.records import Failure, FailureKind, RunState
from paddleray.services.trainer.spec import RunSpec
from paddleray.services.trainer.worker import Outcome
from paddleray.services.trainer.worker_group import WorkerGroup, bundle

log = logging.getLogger(__name__)

_CAUSE_CHARS = 500
# When a rank raises, its peers may have died just before: a collective with a dead peer
# raises in the survivors (gloo reports a closed connection) about as fast as Ray reports the
# death. Waiting this long for a death names the root cause instead of its echo.
_PEER_DEATH_WAIT_S = 1.5
# A placement group that takes this long is probably waiting for resources: say which.
_PLACEMENT_HINT_AFTER_S = 2.0
_PLACEMENT_HINT_EVERY_S = 10.0


@dataclass(frozen=True)
class StopRequest:
    state: RunState  # STOPPED or TIMED_OUT
    reason: str
    grace_s: float

    @property
    def kind(self) -> FailureKind:
        return FailureKind.TIMEOUT if self.state == RunState.TIMED_OUT else FailureKind.STOPPED


class RunExecutor:
    def __init__(
        self,
        run_id: str,
        spec: RunSpec,
        registry: runs.RunRegistry,
        pool: WorkerPool,
        storage_root: Path | str,
        poll_timeout_s: float = 1.0,
        timeout_grace_s: float = 10.0,
    ) -> None:
        self.run_id = run_id
        self.spec = spec
        self._registry = registry
        self._pool = pool
        self._paths = RunPaths.of(storage_root, run_id)
        self._poll_timeout_s = poll_timeout_s
        self._timeout_grace_s = timeout_grace_s
        self._stop: StopRequest | None = None
        self._stop_asked = asyncio.Event()
        self._storage_root = storage_root
        self._last_report: float | None = None
        self._reported_throughput = False
        self._best: CheckpointInfo | None = None
        # Why the cluster can never place this run, while it waits for placement.
        self._unplaceable: str | None = None
        self._lost = ""
        self.group: WorkerGroup | None = None

    def request_stop(self, state: RunState, reason: str, grace_s: float) -> None:
        if self._stop is None:
            self._stop = StopRequest(state, reason, grace_s)
            self._registry.transition(self.run_id, RunState.STOPPING, reason)
            self._stop_asked.set()

    def abandon(self, reason: str) -> None:
        """Marks the run as lost with its Ray cluster; the caller then cancels run().

        The run ends FAILED with `reason` (a stop asked earlier still decides the state), and
        its group is not kept warm: its actors are gone.
        """
        self._lost = reason
        if self.group is not None:
            self.group.alive = False

    async def run(self) -> None:
        created = time.monotonic()
        timer = None
        if self.spec.timeout_s is not None:
            timer = asyncio.get_running_loop().call_later(
                self.spec.timeout_s,
                lambda: self.request_stop(
                    RunState.TIMED_OUT, f"ran past its timeout of {self.spec.timeout_s:g}s", self._timeout_grace_s
                ),
            )
        group: WorkerGroup | None = None
        reusable = False
        try:
            group, warm = await self._acquire()
            self.group = group
            if group is None:
                return self._end(RunState.STOPPED, "before its workers started")
            self._registry.transition(self.run_id, RunState.STARTING, "worker group placed")
            self._registry.set_workers(self.run_id, [replace(w, warm=warm) for w in group.workers])
            await self._start_ranks(group)
            self._registry.transition(self.run_id, RunState.RUNNING, "user code started on every rank")
            metrics.TIME_TO_FIRST_LINE.labels(warm=str(warm).lower()).observe(time.monotonic() - created)
            state, reason, failure, reusable = await self._supervise(group)
            self._end(state, reason, failure)
        except _RankLost as lost:
            self._end(RunState.FAILED, _reason(lost.failure), lost.failure)
        except asyncio.CancelledError:
            if self._lost:  # its actors ended with the cluster: a retry starts them anew
                self._end(RunState.FAILED, self._lost, Failure(FailureKind.WORKER_LOST, self._lost))
                return
            reason = "" if self._stop else "the trainer shut down"
            self._end(RunState.STOPPED, reason, Failure(FailureKind.STOPPED, reason or "stopped"))
            raise
        except Exception as exc:  # noqa: BLE001 - the run fails with the cause; the service stays up
            log.exception("run %s failed in the trainer", self.run_id)
            reason = f"trainer error: {type(exc).__name__}: {exc}"[:_CAUSE_CHARS]
            self._end(RunState.FAILED, reason, Failure(FailureKind.TRAINER_ERROR, reason))
        finally:
            if timer is not None:
                timer.cancel()
            if group is not None:
                self._pool.release(group, reusable)
            if self._reported_throughput:
                metrics.SAMPLES_PER_SECOND.remove(self.run_id)
            shutil.rmtree(self._paths.staging, ignore_errors=True)

    def _end(self, state: RunState, reason: str, failure: Failure | None = None) -> None:
        """Moves the run to its terminal state; a stop that was asked decides the state."""
        self._sync_checkpoints()
        if self._stop is not None:
            state, reason = self._stop.state, f"{self._stop.reason}{reason and '; ' + reason}"
            failure = Failure(self._stop.kind, reason)
            if state == RunState.TIMED_OUT and self.group is None and self._unplaceable:
                # It timed out waiting for a placement the cluster can never give it.
                failure = Failure(FailureKind.PLACEMENT_IMPOSSIBLE, f"{reason}: {self._unplaceable}")
        elif state == RunState.STOPPED and failure is None:
            failure = Failure(FailureKind.STOPPED, reason)
        self._registry.transition(self.run_id, state, reason, failure)

    def _sync_checkpoints(self) -> None:
        """Records a checkpoint committed on disk whose report was not polled (its worker died)."""
        self._registry.recover_checkpoint(self.run_id, checkpoint_store(self._paths.checkpoints), self.spec.retention)

    async def _acquire(self) -> tuple[WorkerGroup | None, bool]:
        """The worker group, or None when a stop came first. Cancelling frees what it took."""

        def placed() -> None:
            self._registry.transition(self.run_id, RunState.STARTING, "placement group ready; starting workers")

        acquiring = asyncio.ensure_future(self._pool.acquire(self.spec.group, on_placed=placed))
        stopped = asyncio.ensure_future(self._stop_asked.wait())
        try:
            wait_s = _PLACEMENT_HINT_AFTER_S
            while not (acquiring.done() or stopped.done()):
                await asyncio.wait({acquiring, stopped}, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
                if not (acquiring.done() or stopped.done()):
                    await self._explain_pending()
                wait_s = _PLACEMENT_HINT_EVERY_S
        except BaseException:
            # asyncio.wait leaves its tasks running: an orphaned acquire would place a group
            # (and start its actors) for a run that no longer exists.
            await _abandon(acquiring, self._pool)
            raise
        finally:
            stopped.cancel()
        if acquiring.done():
            return acquiring.result()
        await _abandon(acquiring, self._pool)
        return None, False

    async def _explain_pending(self) -> None:
        """Says in the PENDING run's state_reason which resources its placement waits for."""
        if self._registry.get(self.run_id).state != RunState.PENDING:
            return
        try:
            total, available, nodes = await in_daemon_thread(placement.cluster_view)
        except Exception as exc:  # noqa: BLE001 - the hint is best effort; placement goes on
            log.warning("run %s: cannot read cluster resources for a placement hint: %s", self.run_id, exc)
            return
        # Idle warm groups are evicted for a waiting run: what they hold counts as available.
        idle = self._pool.idle_resources()
        available = {k: available.get(k, 0.0) + idle.get(k, 0.0) for k in {*available, *idle}}
        group = self.spec.group
        hint = placement.explain_placement(
            bundle(group.resources), group.num_workers, group.strategy, total, available, nodes
        )
        self._unplaceable = hint.text if hint.impossible else None
        self._registry.explain(self.run_id, RunState.PENDING, hint.text)

    async def _start_ranks(self, group: WorkerGroup) -> None:
        shards: list[dict[str, Any]] = [{} for _ in group.actors]
        if self.spec.datasets:
            from paddleray.services.trainer.datasets import open_dataset_shards

            shards = await in_daemon_thread(functools.partial(
                open_dataset_shards, list(self.spec.datasets), len(group.actors), self._storage_root
            ))
        base = ContextSpec(
            run_name=names.RUN.format(run=self.run_id),
            paths=self._paths,
            rank=0,
            world_size=len(group.actors),
            local_rank=0,
            config=self.spec.config,
            device=PaddleBackendConfig(use_gpu=self.spec.group.resources.num_gpus > 0).device,
            resume_from=self.spec.resume_from,
            init_from=self.spec.init_from,
            retention=self.spec.retention,
            commit_in_background=self.spec.commit_in_background,
        )
        started = await asyncio.gather(
            *(
                actor.start.remote(
                    self.spec.entrypoint,
                    replace(base, rank=rank, local_rank=group.workers[rank].local_rank, dataset_shards=shards[rank]),
                    self.spec.package_entrypoint,
                )
                for rank, actor in enumerate(group.actors)
            ),
            return_exceptions=True,
        )
        for rank, result in enumerate(started):
            # A rank whose function ends its process at once can die before the reply to
            # `start` left it (seen in CI: a rank exiting right after its first collective):
            # that is the rank lost, as it would be a moment later, not the trainer's error.
            if isinstance(result, ray.exceptions.RayActorError | ray.exceptions.NodeDiedError):
                raise _RankLost(_with_node(Failure(FailureKind.WORKER_LOST, _cause(result), rank), group))
            if isinstance(result, BaseException):
                raise result

    async def _supervise(self, group: WorkerGroup) -> tuple[RunState, str, Failure | None, bool]:
        """Waits for every rank; returns (state, reason, failure, whether the group may be reused)."""
        followers: dict[asyncio.Future, int] = {
            asyncio.ensure_future(self._follow(actor)): rank for rank, actor in enumerate(group.actors)
        }
        timer: asyncio.Future = asyncio.ensure_future(self._stop_asked.wait())
        stopping = False
        try:
            while followers:
                done, _ = await asyncio.wait({*followers, timer}, return_when=asyncio.FIRST_COMPLETED)
                for task in done & followers.keys():
                    failure = _on_node(_failure(followers.pop(task), task), group)
                    if failure is not None:
                        reason = _reason(failure)
                        if not _died(task) and (death := _on_node(await _first_death(followers), group)):
                            # The peer's death is the root cause; the raise was its echo.
                            reason, failure = f"{_reason(death)}\n(then {reason})", death
                        group.kill()
                        return RunState.FAILED, reason, failure, False
                if timer in done and followers:
                    grace_s = self._stop.grace_s if self._stop is not None else 0.0
                    if stopping:
                        group.kill()
                        return RunState.STOPPED, f"killed after the {grace_s:g}s grace period", None, False
                    stopping = True
                    for actor in group.actors:
                        actor.request_stop.remote()
                    timer = asyncio.ensure_future(asyncio.sleep(grace_s))
            return RunState.SUCCEEDED, "", None, True
        finally:
            for task in [*followers, timer]:
                task.cancel()

    async def _follow(self, actor) -> Outcome:
        while True:
            poll = await actor.next_reports.remote(self._poll_timeout_s)
            for report in poll.reports:
                self._on_report(report)
            if poll.outcome is not None:
                return poll.outcome

    def _on_report(self, report: Report) -> None:
        if report.rank != 0:  # rank 0's metrics are the run's
            return
        now = time.monotonic()
        if self._last_report is not None:
            metrics.STEP_SECONDS.observe(now - self._last_report)
        self._last_report = now
        if "samples_per_s" in report.metrics:
            metrics.SAMPLES_PER_SECOND.labels(run=self.run_id).set(report.metrics["samples_per_s"])
            self._reported_throughput = True
        self._registry.add_metrics(self.run_id, report.step, report.metrics)
        if report.checkpoint is not None:
            # Kept from the reports rather than by reading every manifest again on the event
            # loop (retention never deletes the best checkpoint).
            policy = self.spec.retention
            if policy.best_metric in report.checkpoint.metrics and (
                self._best is None or policy.rank_key(report.checkpoint) < policy.rank_key(self._best)
            ):
                self._best = report.checkpoint
            self._registry.add_checkpoint(self.run_id, report.checkpoint, self._best)


async def _abandon(acquiring: asyncio.Future, pool: WorkerPool) -> None:
    """Cancels a pool.acquire() and frees the group it may have got all the same."""
    acquiring.cancel()
    await asyncio.wait({acquiring})
    if not acquiring.cancelled() and acquiring.exception() is None:
        pool.release(acquiring.result()[0], reusable=False)


def _failure(rank: int, task: asyncio.Future) -> Failure | None:
    """Why a rank's follower ended badly, or None when the rank's function returned.

    The worker's process dying (crash, OOM kill, node loss) is WORKER_LOST; Ray failing the
    poll otherwise is the trainer's own error; the function raising is USER_CODE, unless it
    was the trainer's checkpoint commit at the end of the function that failed."""
    try:
        outcome = task.result()
    except (ray.exceptions.RayActorError, ray.exceptions.NodeDiedError, ray.exceptions.OutOfMemoryError) as exc:
        return Failure(FailureKind.WORKER_LOST, _cause(exc), rank)
    except ray.exceptions.RayError as exc:
        return Failure(FailureKind.TRAINER_ERROR, _cause(exc), rank)
    if outcome.ok:
        return None
    kind = FailureKind.USER_CODE if outcome.user_code else FailureKind.TRAINER_ERROR
    return Failure(kind, outcome.error, rank, outcome.traceback)


def _on_node(failure: Failure | None, group: WorkerGroup) -> Failure | None:
    return None if failure is None else _with_node(failure, group)


def _with_node(failure: Failure, group: WorkerGroup) -> Failure:
    """A lost rank's failure with the node it ran on (the node is what an operator looks at
    when a machine goes away: node loss kills every rank there)."""
    if failure.kind != FailureKind.WORKER_LOST or failure.rank is None:
        return failure
    if failure.rank >= len(group.workers) or not group.workers[failure.rank].node_id:
        return failure
    return replace(failure, node_id=group.workers[failure.rank].node_id)


def _reason(failure: Failure) -> str:
    """The run's state_reason for a rank's failure (what it said before failures were data)."""
    if failure.kind == FailureKind.WORKER_LOST:
        where = f" on node {failure.node_id}" if failure.node_id else ""
        return f"rank {failure.rank} died{where}: {failure.message}"
    if failure.kind == FailureKind.USER_CODE:
        return f"rank {failure.rank} raised {failure.message}\n{failure.traceback}"
    return f"rank {failure.rank} failed in its worker: {failure.message}\n{failure.traceback}".rstrip()


class _RankLost(Exception):
    """A rank's process died while it was being started."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def _died(task: asyncio.Future) -> bool:
    return isinstance(task.exception(), ray.exceptions.RayActorError)


async def _first_death(followers: dict[asyncio.Future, int]) -> Failure | None:
    """The failure of the first of `followers` to die within the wait, or None."""
    deadline = time.monotonic() + _PEER_DEATH_WAIT_S
    pending = set(followers)
    while pending and (left := deadline - time.monotonic()) > 0:
        done, pending = await asyncio.wait(pending, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if _died(task):
                return _failure(followers[task], task)
    return None


def _cause(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    # Ray's message opens with the actor's ids; the cause (exit type and detail) follows.
    _, marker, cause = text.partition("The actor is dead because")
    return (marker + cause if marker else text)[:_CAUSE_CHARS]
