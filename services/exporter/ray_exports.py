"""Runs export_task.run_export on the Ray cluster and streams its phases back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import ray

from paddleray.services.exporter.export_task import run_export


class RayExportRunner:
    """One Ray generator task per export, in the runtime env of the job it exports."""

    def __init__(self, num_cpus: float = 1.0, connected: Callable[[], bool] = lambda: True) -> None:
        self.num_cpus = num_cpus
        # False once the cluster is lost: its tasks ended with it, and Ray is not called then.
        self.connected = connected

    async def run(self, request: dict[str, Any], runtime_env: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        task = ray.remote(run_export).options(
            num_returns="streaming",
            num_cpus=self.num_cpus,
            runtime_env=runtime_env or None,
            # A retry would redo a conversion that failed for a reason of its own; a lost worker
            # fails the version, and the user exports again.
            max_retries=0,
            name=f"export {request['version']}",
        )
        generator: Any = task.remote(request)  # an ObjectRefGenerator (num_returns="streaming")
        finished = False
        try:
            async for ref in generator:
                yield await ref
            finished = True
        finally:
            if not finished and self.connected():  # timed out, or the exporter is shutting down: free the worker
                ray.cancel(generator, force=True)
