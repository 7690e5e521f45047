"""The package collector: removes stored code packages nothing will run again.

A package is removed when both hold:
- it was not used for `package_retention_s` (7 days by default): neither uploaded nor named
  by a new job or trial (PackageStore.touch at CreateJob, packages.py), and
- no unfinished job names it (read from the jobs in every non-terminal state), so a job
  queued, running or waiting for a retry keeps its code however old it is.
A running sweep names its package again with every trial it creates. Every replica may run
it: removing a file twice is harmless, and a job that names a package between the collector's
read and the removal has touched it, which the removal checks last (PackageStore.collect).
"""

from __future__ import annotations

import asyncio
import logging

from redis.exceptions import RedisError

from paddleray.scheduler.v1 import job_pb2
from paddleray.services.common import packages, states
from paddleray.services.scheduler.packages import PackageStore
from paddleray.services.scheduler.store import JobStore

log = logging.getLogger(__name__)

UNFINISHED = sorted(set(job_pb2.JobState.values()) - set(states.JOB_TERMINAL) - {job_pb2.JOB_STATE_UNSPECIFIED})
_READ_CHUNK = 500


class PackageCollector:
    def __init__(self, store: PackageStore, jobs: JobStore, retention_s: float, interval_s: float) -> None:
        self.store = store
        self.jobs = jobs
        self.retention_s = retention_s
        self.interval_s = interval_s

    async def in_use(self) -> set[str]:
        """Digests of the packages unfinished jobs name."""
        ids = await self.jobs.ids_in_states(UNFINISHED)
        named: set[str] = set()
        for start in range(0, len(ids), _READ_CHUNK):
            for record in await self.jobs.get_many(ids[start:start + _READ_CHUNK]):
                working_dir = record.job.spec.runtime_env.working_dir if record else ""
                if packages.is_package_uri(working_dir):
                    named.add(packages.digest_from_uri(working_dir, "working_dir"))
        return named

    async def collect_once(self) -> list[str]:
        """One pass; the digests removed."""
        if not self.retention_s:
            return []
        in_use = await self.in_use()
        return await asyncio.to_thread(self.store.collect, in_use, self.retention_s)

    async def run(self) -> None:
        while True:
            try:
                await self.collect_once()
            except (RedisError, OSError) as exc:  # the store is down: the next pass tries again
                log.warning("package collection skipped: %s", exc)
            await asyncio.sleep(self.interval_s)
