"""SchedulerApp: the scheduler's parts wired together, with start and stop.

Built inside the event loop (grpc.aio channels bind to the loop that creates them).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools

from paddleray.services.common import redis_client
from paddleray.services.scheduler import store_health
from paddleray.services.scheduler.dispatcher import Dispatcher
from paddleray.services.scheduler.experiment_store import ExperimentStore
from paddleray.services.scheduler.experiments import ExperimentManager
from paddleray.services.scheduler.job_inputs import JobInputs
from paddleray.services.scheduler.job_logs import JobLogs
from paddleray.services.scheduler.jobs import JobManager
from paddleray.services.scheduler.object_packages import package_store
from paddleray.services.scheduler.package_gc import PackageCollector
from paddleray.services.scheduler.settings import SchedulerSettings
from paddleray.services.scheduler.store import JobStore
from paddleray.services.scheduler.store_health import StoreHealth
from paddleray.services.scheduler.trainer_client import TrainerClient


class SchedulerApp:
    def __init__(self, settings: SchedulerSettings) -> None:
        self.settings = settings
        # Waiting readers of events share one blocking read (event_feed.py); the rest are short calls.
        self.redis = redis_client.connect(settings, max_connections=1024)
        store_health.register()
        self.store_health = StoreHealth(self.redis, settings.store_check_interval_s)
        self.store = JobStore(self.redis, events_cap=settings.events_cap)
        self.packages = package_store(settings.storage_root, settings.package_max_bytes)
        self.package_collector = PackageCollector(self.packages, self.store, settings.package_retention_s,
                                                  settings.package_gc_interval_s)
        self._collecting: asyncio.Task | None = None
        self.inputs = JobInputs(self.packages, self.store, settings.storage_root, settings.entrypoint_allowlist)
        self.trainer = TrainerClient(settings.trainer)
        queued = asyncio.Event()  # set by the job manager, waited on by the dispatcher
        self.manager = JobManager(
            self.store, settings.aging_s_per_priority, settings.stop_wait_s,
            prepare_spec=self.inputs.prepare,
            stop_run=functools.partial(self.trainer.request_stop, grace_s=settings.stop_grace_s), queued=queued,
        )
        self.dispatcher = Dispatcher(self.manager, self.trainer, settings, wake=queued)
        self.logs = JobLogs(self.manager, self.trainer)
        self.experiments = ExperimentManager(self.manager, ExperimentStore(self.redis))
        self.experiments.register(self.manager.hooks)

    async def start(self) -> None:
        # Known before the loops start, so that an unreachable store is reported (once) as such.
        await self.store_health.refresh()
        await asyncio.to_thread(self.packages.remove_stale_uploads)
        self._collecting = asyncio.create_task(self.package_collector.run(), name="package-gc")
        if self.settings.dispatch:
            await self.dispatcher.start()
        self.experiments.start()

    async def stop(self) -> None:
        if self._collecting is not None:
            self._collecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._collecting
        await self.experiments.stop()
        await self.dispatcher.stop()
        await self.trainer.close()
        await self.store.feed.close()
        await self.redis.aclose()
        self.store_health.close()
