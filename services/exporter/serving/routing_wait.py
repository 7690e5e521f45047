"""Waiting until a Serve app's replicas route by a routing-table generation, from a Ray task.

The wait asks replicas through a DeploymentHandle, and it runs as a task on the cluster, not in
the exporter. A handle starts Serve's router in the process that makes it, and nothing stops
that router: an event-loop thread with a long-poll client (and, for autoscaled deployments, a
metrics pusher) calling the Serve controller's actor, and an event-loop monitor recording Ray
metrics every 5 s. In the exporter that thread outlived a lost cluster's `ray.shutdown()` and
went on calling into Ray while the connection made a new driver. It was the first suspect for
the exporter's SIGSEGVs while it reconnected after a head restart; the cause found was Serve's
stale controller client (ray_connection.forget_serve_client), but a thread of the old cluster's
has no business in the new driver either. In a cluster worker the router dies with its cluster;
the exporter only submits an already exported function (local, see
services/common/ray_connection.py) and awaits its result.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from typing import Any

import ray

from paddleray.services.common.errors import Unavailable
from paddleray.services.common.ray_connection import free_in_daemon_thread, in_daemon_thread

_POLL_S = 0.25
# One generation() call: a replica that does not answer in this is asked again until the deadline.
_ANSWER_TIMEOUT_S = 10.0
# For the task to get a worker (a process start on a loaded node).
_START_S = 60.0


async def wait_for_generation(app: str, deployment: str | None, replicas: int, generation: int, timeout_s: float,
                              what: str) -> None:
    """Returns once `replicas` replicas of the app (its ingress deployment when `deployment` is
    None) answer generation() with `generation`; Unavailable if not within timeout_s."""
    ref = await in_daemon_thread(lambda: _task().remote(app, deployment, replicas, generation, timeout_s),
                                 on_abandoned=_cancel_quietly)
    # Bounded here too: a task that never gets a worker would otherwise hold the pass.
    bound_s = timeout_s + _ANSWER_TIMEOUT_S + _START_S
    try:
        async with asyncio.timeout(bound_s):
            problem = await ref
    except TimeoutError:
        free_in_daemon_thread(_cancel_quietly, ref)
        raise Unavailable(f"{what}: its replicas could not be asked within {bound_s:g} s") from None
    except asyncio.CancelledError:
        # The pass was cancelled (cluster lost, exporter stopping): stop asking on the cluster.
        free_in_daemon_thread(_cancel_quietly, ref)
        raise
    except ray.exceptions.RayError as exc:  # the worker or the cluster went
        raise Unavailable(f"{what}: could not ask its replicas ({type(exc).__name__}: {str(exc)[:300]})") from exc
    if problem:
        raise Unavailable(f"{what} {problem}")


@functools.cache
def _task() -> Any:
    # One remote function for the process: its first .remote() per connection exports it to
    # the GCS, a blocking call (services/common/ray_connection.py).
    return ray.remote(num_cpus=0, max_retries=0)(answering_generation)


def answering_generation(app: str, deployment: str | None, replicas: int, generation: int, timeout_s: float) -> str:
    """On the cluster: '' once 3 calls a replica in a row answered `generation` (calls go to
    replicas at random), else why not."""
    from ray import serve

    if deployment is None:
        handle = serve.get_app_handle(app)
    else:
        handle = serve.get_deployment_handle(deployment, app, _check_exists=False, _record_telemetry=False)
    deadline = time.monotonic() + timeout_s
    agreeing, seen = 0, None
    while agreeing < 3 * replicas:
        if time.monotonic() > deadline:
            return f"did not take routing table {generation} in time (last answer: {seen!r})"
        try:
            seen = handle.generation.remote().result(timeout_s=_ANSWER_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - a replica restarting; ask again until the deadline
            seen = exc
        agreeing = agreeing + 1 if seen == generation else 0
        if seen != generation:
            time.sleep(_POLL_S)
    return ""


def _cancel_quietly(ref: Any) -> None:
    with contextlib.suppress(Exception):  # ended already, or its cluster went
        ray.cancel(ref)
