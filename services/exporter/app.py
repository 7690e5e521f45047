"""ExporterApp: the exporter's parts wired together, with start, stop and readiness.

Built inside the event loop (grpc.aio channels and redis.asyncio clients bind to it).

The Ray cluster is reached through services/common/ray_connection.py (the trainer's
mechanism): never `ray.init` without the configured address; NOT_SERVING, and UNAVAILABLE
for ExportModel, until connected and while the cluster is away; on a Ray head restart the
connection lets go of the lost cluster well before Ray would end this process, `_on_ray_lost`
fails the exports in flight (WORKER_LOST) and marks deployments UNHEALTHY, and once connected
to the new cluster the reconciler starts Serve and deploys every recorded deployment again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from paddleray.services.common.ray_connection import RayConnection
from paddleray.services.exporter.deployment_store import DeploymentStore
from paddleray.services.exporter.deployments import DeploymentManager
from paddleray.services.exporter.direct_ports import DirectPorts, parse_range
from paddleray.services.exporter.exports import ExportManager
from paddleray.services.exporter.models import ModelRegistry
from paddleray.services.exporter.ray_exports import RayExportRunner
from paddleray.services.exporter.reconciler import Reconciler
from paddleray.services.exporter.serving.controller import ServingController
from paddleray.services.exporter.serving.ownership import ServeOwnership
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
        self.ray = RayConnection(settings.ray_address, namespace="paddleray", service="exporter",
                                 probe_interval_s=settings.ray_probe_interval_s,
                                 lost_after_s=settings.ray_lost_after_s,
                                 retry_interval_s=settings.ray_retry_interval_s)
        self.jobs = SchedulerJobs(settings.scheduler_address, settings.scheduler_auth_token,
                                  settings.scheduler_rpc_timeout_s)
        self.exports = ExportManager(
            self.store, self.jobs, runner or RayExportRunner(settings.export_num_cpus, connected=lambda: self.ray.connected),
            settings.storage_root, settings.builder_allowlist, settings.replica_id, settings.owner_lease_s,
            settings.export_timeout_s, cluster_connected=lambda: self.ray.connected,
        )
        self.models = ModelRegistry(self.store, settings.storage_root)
        self.controller = ServingController(grpc_port=settings.serving_grpc_port, http_host=settings.serving_http_host,
                                            http_port=settings.serving_http_port,
                                            direct_host=settings.serving_direct_host)
        self.direct_ports = DirectPorts(self.redis, parse_range(settings.serving_direct_ports), settings.serving_direct_host)
        self.ownership = ServeOwnership()
        self.reconciler = Reconciler(self.deployment_store, self.store, self.controller, self.ray, settings.storage_root,
                                     settings.reconcile_interval_s, ownership=self.ownership,
                                     direct_ports=self.direct_ports)
        def endpoint() -> str:
            return settings.inference_endpoint or f"127.0.0.1:{self.controller.grpc_port}"

        async def direct_endpoints() -> dict[str, str]:
            ports = await self.direct_ports.assigned()
            return {deployment_id: settings.direct_endpoint(port) for deployment_id, port in ports.items()}

        self.deployments = DeploymentManager(self.deployment_store, self.store, endpoint, on_change=self.reconciler.wake,
                                             live=self.reconciler.live, direct_endpoints=direct_endpoints)
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        # Exports a predecessor left behind end now, not only after the first sweep interval.
        with contextlib.suppress(RedisError, OSError):
            await self.exports.sweep()
        self._tasks.append(asyncio.create_task(self.exports.run_sweeper(self.settings.sweep_interval_s)))
        # A process that is a Ray driver already (tests) lends its connection, at once; otherwise
        # the connection is made in the background (NOT_SERVING until then) and watched.
        if not self.ray.adopt_existing():
            self._tasks.append(asyncio.create_task(self.ray.run(self._on_ray_lost)))
        # Its first pass applies every recorded deployment (an exporter restart needs no manual step).
        self._tasks.append(asyncio.create_task(self.reconciler.run()))

    async def ready(self) -> bool:
        """SERVING only while Redis and the Ray cluster can both be reached."""
        try:
            await asyncio.wait_for(self.redis.ping(), 2.0)
        except (RedisError, OSError, TimeoutError):
            return False
        return self.ray.connected

    async def _on_ray_lost(self, reason: str) -> None:
        """The cluster went with everything on it (no Ray call here: its GCS is gone)."""
        await self.exports.cluster_lost(reason)
        await self.reconciler.cluster_lost(reason)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.controller.stop()  # detaches: Serve keeps serving for the next exporter
        with contextlib.suppress(RedisError, OSError):
            await self.exports.shutdown()
        await self.ray.close()  # after the exports: their tasks are cancelled on the cluster
        await self.jobs.close()
        await self.redis.aclose()
