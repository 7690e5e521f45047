"""WorkerGroup: one Ray actor per rank, placed together in a placement group.

A group is reserved (placement group ready), started (actors created, Paddle imported),
joined into one collective group by the PaddleBackend once, and then runs any number of
runs one after the other (see pool.py). Killing it frees its actors and its reservation.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from paddleray.services.common import ray_private
from paddleray.services.common.ray_connection import free_in_daemon_thread, in_daemon_thread
from paddleray.services.trainer import metrics
from paddleray.services.trainer.backend import PaddleBackend, PaddleBackendConfig
from paddleray.services.trainer.records import WorkerInfo
from paddleray.services.trainer.spec import EnvSpec, GroupSpec, WorkerResources
from paddleray.services.trainer.worker import WorkerActor

log = logging.getLogger(__name__)

# Threads per actor: the user function's own thread is separate; these serve next_reports,
# request_stop and the setup calls concurrently.
_ACTOR_CONCURRENCY = 4
_group_ids = itertools.count(1)


@functools.cache
def _worker_actor_class() -> Any:
    # One actor class for the process: each ray.remote object exports itself to the GCS on its
    # first .remote() per connection (a blocking call with no timeout); a reused class does not
    # again, so creating actors is local (see services/common/ray_connection.py).
    return ray.remote(WorkerActor)


def bundle(resources: WorkerResources) -> dict[str, float]:
    """The placement-group bundle of one rank: exactly what its actor asks for."""
    entries: dict[str, float] = {"CPU": resources.num_cpus}
    if resources.num_gpus:
        entries["GPU"] = resources.num_gpus
    if resources.memory_bytes:
        entries["memory"] = float(resources.memory_bytes)
    entries.update(dict(resources.custom))
    return entries


# Variables that only take effect when set before the process starts (the dynamic loader's,
# the interpreter's, the C library's allocator and locale, Ray's core worker's), or that Ray
# itself sets per worker (device visibility): only Ray's runtime_env sets them in time.
_AT_START_PREFIXES = ("LD_", "PYTHON", "RAY_", "MALLOC_", "GLIBC_", "LC_")
_AT_START_NAMES = frozenset({"LANG", "TZ", "TMPDIR"})


def _set_at_start(name: str) -> bool:
    if name == "PYTHONPATH":  # the worker puts its entries on sys.path (worker.apply_env)
        return False
    return name.startswith(_AT_START_PREFIXES) or name in _AT_START_NAMES or "VISIBLE_" in name


def split_env(env: EnvSpec) -> tuple[dict[str, Any], dict[str, str]]:
    """(Ray's runtime_env for the actors, the env vars each worker sets itself in __init__).

    Any runtime_env makes Ray start a worker through its setup_worker shim: a whole extra
    Python interpreter importing Ray (about 0.3 core-s here) plus a round trip to the node's
    runtime-env agent, per worker, and no prestarted worker fits it (bench concurrency). Env
    vars alone need none of that: the worker sets them before it runs anything of the run's,
    as Ray would. A working_dir or image still goes through Ray, and so do the env vars then
    and whenever one of them must be set before the process starts.
    """
    if env.working_dir or env.image or any(_set_at_start(name) for name, _ in env.env_vars):
        return env.to_ray(), {}
    return {}, dict(env.env_vars)


def actor_options(
    spec: GroupSpec, group: PlacementGroup | None, rank: int, runtime_env: dict[str, Any] | None = None
) -> dict[str, Any]:
    resources = spec.resources
    options: dict[str, Any] = {
        "num_cpus": resources.num_cpus,
        "num_gpus": resources.num_gpus,
        "max_concurrency": _ACTOR_CONCURRENCY,
        "max_restarts": 0,
        "runtime_env": (runtime_env if runtime_env is not None else split_env(spec.env)[0]) or None,
    }
    if resources.memory_bytes:
        options["memory"] = resources.memory_bytes
    if resources.custom:
        options["resources"] = dict(resources.custom)
    if group is not None:
        options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
            placement_group=group, placement_group_bundle_index=rank
        )
    return options


def local_ranks(node_ids: Sequence[str]) -> list[int]:
    """Each rank's position among the ranks on its node, in rank order."""
    seen: dict[str, int] = {}
    ranks = []
    for node in node_ids:
        ranks.append(seen.get(node, 0))
        seen[node] = ranks[-1] + 1
    return ranks


@dataclass
class WorkerGroup:
    spec: GroupSpec
    placement: PlacementGroup | None
    actors: list[Any] = field(default_factory=list)
    workers: list[WorkerInfo] = field(default_factory=list)  # info() of each rank, with its local_rank
    id: int = field(default_factory=lambda: next(_group_ids))
    alive: bool = True

    @classmethod
    async def reserve(cls, spec: GroupSpec) -> WorkerGroup:
        """Asks Ray for the placement group; wait on `ready()` before starting actors.

        placement_group() waits on the GCS (for as long as it is down), so it runs off the event
        loop; a reservation made after its caller gave up is freed."""
        placement = await in_daemon_thread(
            lambda: placement_group([bundle(spec.resources)] * spec.num_workers, strategy=spec.strategy),
            on_abandoned=_remove_quietly,
        )
        return cls(spec, placement)

    def ready(self) -> ray.ObjectRef:
        assert self.placement is not None, "reserve() makes groups with a placement group"
        return self.placement.ready()

    async def start(self, backend_config: PaddleBackendConfig) -> None:
        """Starts the actors (Paddle imported in each) and joins them into one collective group."""
        runtime_env, env_vars = split_env(self.spec.env)
        if self.spec.env.working_dir:
            runtime_env = await in_daemon_thread(functools.partial(ray_private.upload_working_dir, runtime_env))
        actor_class = _worker_actor_class()

        def create() -> list[Any]:
            return [
                actor_class.options(**actor_options(self.spec, self.placement, rank, runtime_env)).remote(
                    self.spec.resources.num_gpus, bool(self.spec.env.working_dir), env_vars
                )
                for rank in range(self.spec.num_workers)
            ]

        # Off the event loop: the first creation on a connection exports the class to the GCS.
        self.actors = await in_daemon_thread(create, on_abandoned=_kill_quietly)
        metrics.ACTOR_STARTS.inc(len(self.actors))
        infos: list[WorkerInfo] = await asyncio.gather(*(actor.info.remote() for actor in self.actors))
        self.workers = [
            replace(info, local_rank=local)
            for info, local in zip(infos, local_ranks([i.node_id for i in infos]), strict=True)
        ]
        await PaddleBackend(backend_config).on_start(self.actors)

    def kill(self) -> None:
        """Kills every actor at once (so no rank waits in a collective) and frees the reservation."""
        self.alive = False
        for actor in self.actors:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        if self.placement is not None:
            # A GCS call: it blocks for up to a minute while the head is down (a dead actor
            # is how a head restart first shows), so it never runs on the event loop.
            free_in_daemon_thread(_remove_quietly, self.placement)
        log.info("worker group %d killed (%d actors)", self.id, len(self.actors))


def _kill_quietly(actors: list[Any]) -> None:
    for actor in actors:
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)


def _remove_quietly(placement: PlacementGroup) -> None:
    with contextlib.suppress(Exception):
        remove_placement_group(placement)
