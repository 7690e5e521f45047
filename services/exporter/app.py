"""ExporterApp: the exporter's parts wired together, with start, stop and readiness.

Built inside the event loop (grpc.aio channels and redis.asyncio clients bind to it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from paddleray.services.exporter.deployment_store import DeploymentStore
from paddleray.services.exporter.deployments import DeploymentManager
from paddleray.services.exporter.exports import ExportManager
from paddleray.services.exporter.models import ModelRegistry
from paddleray.services.exporter.ray_exports import RayExportRunner
from paddleray.services.exporter.ray_link import RayLink
from paddleray.services.exporter.reconciler import Reconciler
from paddleray.services.exporter.serving.controller import ServingController
from paddleray.services.exporter.settings import ExporterSettings
from paddleray.services.exporter.sources import SchedulerJobs
from paddleray.services.exporter.store import RegistryStore

log = logging.getLogger(__name__)


class ExporterApp:
    def __init__(self, settings: ExporterSettings, runner=None) -> None:
        self.settings = settings
        self.redis = aioredis.Redis.from_url(settings.redis_url, max_connections=256)
        self.store = RegistryStore(self.redis)
        self.deployment_store = DeploymentStore(self.redis)
        self.ray = RayLink(settings.ray_address)
        self.jobs = SchedulerJobs(settings.scheduler_address, settings.scheduler_auth_token,
                                  settings.scheduler_rpc_timeout_s)
        self.exports = ExportManager(
            self.store, self.jobs, runner or RayExportRunner(settings.export_num_cpus), settings.storage_root,
            settings.builder_allowlist, settings.replica_id, settings.owner_lease_s, settings.export_timeout_s,
            cluster_connected=self.ray.connected,
        )
        self.models = ModelRegistry(self.store, settings.storage_root)
        self.controller = ServingController(grpc_port=settings.serving_grpc_port, http_host=settings.serving_http_host,
                                            http_port=settings.serving_http_port)
        self.reconciler = Reconciler(self.deployment_store, self.store, self.controller, self.ray, settings.storage_root,
                                     settings.reconcile_interval_s)
        endpoint = settings.inference_endpoint or f"127.0.0.1:{settings.serving_grpc_port}"
        self.deployments = DeploymentManager(self.deployment_store, self.store, endpoint, on_change=self.reconciler.wake,
                                             live=self.reconciler.live)
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        # Exports a predecessor left behind end now, not only after the first sweep interval.
        with contextlib.suppress(RedisError, OSError):
            await self.exports.sweep()
        self._tasks.append(asyncio.create_task(self.exports.run_sweeper(self.settings.sweep_interval_s)))
        try:
            await self.ray.connect()
        except Exception:  # noqa: BLE001 - a cluster down at boot: NOT_SERVING until it answers
            log.warning("the Ray cluster at %s cannot be reached yet; the reconciler keeps connecting",
                        self.settings.ray_address, exc_info=True)
        # Its first pass applies every recorded deployment (an exporter restart needs no manual step).
        self._tasks.append(asyncio.create_task(self.reconciler.run()))

    async def ready(self) -> bool:
        """SERVING only while Redis and the Ray cluster can both be reached."""
        try:
            await asyncio.wait_for(self.redis.ping(), 2.0)
        except (RedisError, OSError, TimeoutError):
            return False
        return await self.ray.reachable()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.controller.stop()  # detaches: Serve keeps serving for the next exporter
        with contextlib.suppress(RedisError, OSError):
            await self.exports.shutdown()
        await self.jobs.close()
        await self.redis.aclose()
