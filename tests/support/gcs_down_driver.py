"""A Ray driver run as a subprocess by tests/e2e/test_gcs_down_window.py.

It connects to the given head, says "connected", and waits for a line on stdin (the test kills
the head's GCS meanwhile). Then it starts, one after the other, each Ray operation the services
run from their event loop, and prints one JSON line per operation with the longest the loop went
without running a 20 ms tick in the two seconds after it started. An operation that blocks the
loop for good is reported by a watchdog thread (stall_s null) before the process exits: a call
waiting on a dead GCS would hold it until Ray ends the process a minute later.

A subprocess because a blocked GCS call cannot be undone: Ray ends the driver after a minute
without its GCS, and the test session's own Ray connection must not be that driver.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time

import ray

from paddleray.services.common.ray_connection import forbid_addressless_init
from paddleray.services.exporter.export.ray_exports import RayExportRunner
from paddleray.services.trainer.backend import PaddleBackendConfig
from paddleray.services.trainer.spec import GroupSpec, WorkerResources
from paddleray.services.trainer.worker_group import WorkerGroup

WATCH_S = 2.0
GIVE_UP_S = 10.0
SPEC = GroupSpec(resources=WorkerResources(num_cpus=0.1))


def _submit_export():
    return anext(RayExportRunner(num_cpus=0.1).run({"version": "models/m/versions/1"}, {}))


def _reserve_group():
    return WorkerGroup.reserve(SPEC)


def _start_group_actors():
    return WorkerGroup(SPEC, placement=None).start(PaddleBackendConfig())


OPERATIONS = {"submit_export": _submit_export, "reserve_group": _reserve_group,
              "start_group_actors": _start_group_actors}


def _report(line: dict) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


async def _longest_stall(start) -> float:
    task = asyncio.ensure_future(start())
    longest, last = 0.0, time.monotonic()
    end = last + WATCH_S
    while last < end:
        await asyncio.sleep(0.02)
        now = time.monotonic()
        longest, last = max(longest, now - last), now
    task.cancel()
    return longest


async def main(address: str) -> None:
    forbid_addressless_init(address)
    ray.init(address=address, namespace="gcs-down-test", log_to_driver=False)
    _report({"connected": True})
    await asyncio.to_thread(sys.stdin.readline)  # the test kills the GCS, then writes a line
    current = {"op": ""}

    def watchdog() -> None:
        seen, since = "", time.monotonic()
        while True:
            time.sleep(0.5)
            if current["op"] != seen:
                seen, since = current["op"], time.monotonic()
            elif time.monotonic() - since > GIVE_UP_S:
                _report({"op": seen, "stall_s": None})
                os._exit(0)

    threading.Thread(target=watchdog, daemon=True).start()
    for name, start in OPERATIONS.items():
        current["op"] = name
        _report({"op": name, "stall_s": round(await _longest_stall(start), 3)})
    os._exit(0)  # threads still wait on the dead GCS; nothing here is worth a clean shutdown


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
