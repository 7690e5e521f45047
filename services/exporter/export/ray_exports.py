"""Runs in: the exporter process, which submits the export Ray task (its code: export/task/).

Runs export_task.run_export on the Ray cluster and streams its phases back."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Callable
from typing import Any

import ray

from paddleray.services.common import ray_private
from paddleray.services.common.ray_connection import in_daemon_thread
from paddleray.services.exporter.export.task.export_records import ExportRequest, Phase
from paddleray.services.exporter.export.task.export_task import run_export


@functools.cache
def _export_task() -> Any:
    # One remote function for the process: each ray.remote object exports itself to the GCS on
    # its first .remote() per connection (a blocking call with no timeout); a reused one does
    # not again, so a submit is local (see services/common/ray_connection.py).
    return ray.remote(run_export)


class RayExportRunner:
    """One Ray generator task per export, in the runtime env of the job it exports."""

    def __init__(self, num_cpus: float = 1.0, connected: Callable[[], bool] = lambda: True) -> None:
        self.num_cpus = num_cpus
        # False once the cluster is lost: its tasks ended with it, and Ray is not called then.
        self.connected = connected

    async def run(self, request: ExportRequest, runtime_env: dict[str, Any]) -> AsyncIterator[Phase]:
        if runtime_env.get("working_dir") and "://" not in runtime_env["working_dir"]:
            # A stored package's zip (or a directory): Ray takes a task's working_dir only as a URI,
            # so it is uploaded as the trainer uploads a run's (once per content). A GCS call: off the loop.
            runtime_env = await in_daemon_thread(functools.partial(ray_private.upload_working_dir, runtime_env))
        task = _export_task().options(
            num_returns="streaming",
            num_cpus=self.num_cpus,
            runtime_env=runtime_env or None,
            # A retry would redo a conversion that failed for a reason of its own; a lost worker
            # fails the version, and the user exports again.
            max_retries=0,
            name=f"export {request.version}",
        )
        # An ObjectRefGenerator (num_returns="streaming"). Off the event loop: the first submit
        # on a connection waits on the GCS, and a head that stops then would freeze the loop.
        generator: Any = await in_daemon_thread(lambda: task.remote(request), on_abandoned=_cancel_quietly)
        finished = False
        try:
            async for ref in generator:
                yield await ref
            finished = True
        finally:
            if not finished and self.connected():  # timed out, or the exporter is shutting down: free the worker
                _cancel_quietly(generator)


def _cancel_quietly(generator: Any) -> None:
    with contextlib.suppress(Exception):  # ended already, or its cluster went
        ray.cancel(generator, force=True)
