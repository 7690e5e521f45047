"""A Ray driver run as a subprocess by tests/e2e/test_serve_client_across_reconnect.py.

It connects through RayConnection, caches a Serve controller client as Serve does, says
"connected" with its job id, then waits for the connection to be lost and made again (the test
restarts the head meanwhile) and prints whether Serve would still take the old client for the
current session's.
"""

from __future__ import annotations

import asyncio
import json
import sys

import ray
from ray.serve import context as serve_context

from paddleray.services.common.ray_connection import RayConnection


def _report(line: dict) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


async def main(address: str) -> None:
    connection = RayConnection(address, "serve-reconnect-test", "exporter", probe_interval_s=0.5, lost_after_s=3,
                               retry_interval_s=0.5)

    async def on_lost(reason: str) -> None:
        _report({"lost": reason})

    task = asyncio.create_task(connection.run(on_lost))
    while connection.generation < 1:
        await asyncio.sleep(0.1)
    # What serve.start() and every Serve call cache: a client whose controller lives on this cluster.
    serve_context._set_global_client(object())
    _report({"connected": True, "job_id": ray.get_runtime_context().get_job_id()})
    while connection.generation < 2 or not connection.connected:
        await asyncio.sleep(0.1)
    _report({"job_id": ray.get_runtime_context().get_job_id(),
             "old_client_taken_as_current": serve_context._cached_client_from_current_session()})
    task.cancel()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
