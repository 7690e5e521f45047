"""Runs in: the exporter process.

ExporterApp: the exporter's parts wired together, with start, stop and readiness.

Built inside the event loop (grpc.aio channels and redis.asyncio clients bind to it).

The Ray cluster is reached through services/common/ray_connection.py (the trainer's
mechanism): never `ray.init` without the configured address; NOT_SERVING, and UNAVAILABLE
for ExportModel, until connected and while the cluster is away; on a Ray head restart the
connection lets go of the lost cluster well before Ray would end this process, `_on_ray_lost`
fails the exports in flight (WORKER_LOST) and marks deployments UNHEALTHY, and once connected
to the new cluster the reconciler starts Serve and deploys every recorded deployment again.
That reconnect happens in a fresh process by default (ray_lost_exit: the exporter exits with
entry.EXIT_RAY_LOST and its supervisor starts it again, services/localstack/supervisor.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from redis.exceptions import RedisError

from paddleray.services.common import redis_client
from paddleray.services.common.entry import exit_for_a_fresh_process
from paddleray.services.common.ray_connection import RayConnection
from paddleray.services.common.store_health import StoreHealth
from paddleray.services.exporter.deploy import capacity
from paddleray.services.exporter.deploy.deployments import DeploymentManager
from paddleray.services.exporter.deploy.reconciler import Reconciler
from paddleray.services.exporter.export.exports import ExportManager
from paddleray.services.exporter.export.ray_exports import RayExportRunner
from paddleray.services.exporter.export.sources import SchedulerJobs
from paddleray.services.exporter.registry.models import ModelRegistry
from paddleray.services.exporter.serving.control.controller import ServingController
from paddleray.services.exporter.serving.control.ownership import ServeOwnership
from paddleray.services.exporter.serving.control.serve_config import route_prefix
from paddleray.services.exporter.settings import ExporterSettings
from paddleray.services.exporter.store.deployment_store import DeploymentStore
from paddleray.services.exporter.store.registry_store import RegistryStore

log = logging.getLogger(__name__)

# The exporter's loops that retry through a Redis outage.
_LOOP_LOGGERS = ("paddleray.services.exporter.export.exports", "paddleray.services.exporter.deploy.reconciler")


class ExporterApp:
    def __init__(self, settings: ExporterSettings, runner=None) -> None:
        self.settings = settings
        self.redis = redis_client.connect(settings, max_connections=256)
        # Redis as a dependency: NOT_SERVING while it is away, and one log line per outage
        # instead of a traceback from every loop's every pass.
        self.store_health = StoreHealth(self.redis, settings.health_interval_s, service="exporter",
                                        loop_loggers=_LOOP_LOGGERS)
        self.store = RegistryStore(self.redis)
        self.deployment_store = DeploymentStore(self.redis)
        self.ray = RayConnection(settings.ray_address, namespace="paddleray", service="exporter",
                                 probe_interval_s=settings.ray_probe_interval_s,
                                 lost_after_s=settings.ray_lost_after_s,
                                 retry_interval_s=settings.ray_retry_interval_s)
        self.jobs = SchedulerJobs(settings.scheduler)
        self.exports = ExportManager(
            self.store, self.jobs, runner or RayExportRunner(settings.export_num_cpus, connected=lambda: self.ray.connected),
            settings.storage_root, settings.builder_allowlist, settings.replica_id, settings.owner_lease_s,
            settings.export_timeout_s, cluster_connected=lambda: self.ray.connected,
        )
        self.models = ModelRegistry(self.store, settings.storage_root)
        def shown() -> tuple[str, str]:
            """(gRPC address, REST base URL) shown on deployments: what clients reach."""
            local_grpc, local_http = self.controller.local_endpoints()
            return settings.inference_endpoint or local_grpc, (settings.inference_http_endpoint or local_http).rstrip("/")

        def probed() -> tuple[str, str]:
            """The same endpoints as this process reaches them (status() asks a model there)."""
            if not settings.serving_probe_host:
                return self.controller.local_endpoints()
            host = settings.serving_probe_host
            return f"{host}:{self.controller.grpc_port}", f"http://{host}:{self.controller.http_port}"

        self.controller = ServingController(grpc_port=settings.serving_grpc_port, http_host=settings.serving_http_host,
                                            http_port=settings.serving_http_port, endpoints=probed)
        self.ownership = ServeOwnership()
        self.reconciler = Reconciler(self.deployment_store, self.store, self.controller, self.ray, settings.storage_root,
                                     settings.reconcile_interval_s, ownership=self.ownership)

        def http_endpoint(serving_name: str) -> str:
            return f"{shown()[1]}{route_prefix(serving_name)}"

        self.deployments = DeploymentManager(self.deployment_store, self.store, lambda: shown()[0],
                                             on_change=self.reconciler.wake, live=self.reconciler.live,
                                             http_endpoint=http_endpoint,
                                             before_change=self.reconciler.guard.refuse_changes,
                                             node_totals=lambda: capacity.node_totals(self.ray))
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
        """SERVING only while Redis and the Ray cluster can both be reached, and the store is not lost."""
        return await self.store_health.ready() and self.ray.connected and not self.reconciler.guard.lost

    async def _on_ray_lost(self, reason: str) -> None:
        """The cluster went with everything on it (no Ray call here: its GCS is gone).

        Then, with ray_lost_exit (the default), the process ends (entry.EXIT_RAY_LOST) and its
        supervisor starts a fresh one, which connects to the new cluster and deploys every
        recorded deployment again: a driver that reconnected in the process that held the dead
        cluster's driver died of SIGSEGV in 1 of 2 SIGKILLed heads (issue 21 point 3).
        """
        try:
            await self.exports.cluster_lost(reason)
            await self.reconciler.cluster_lost(reason)
        finally:
            if self.settings.ray_lost_exit:
                exit_for_a_fresh_process(reason)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.controller.stop()  # detaches: Serve keeps serving for the next exporter
        with contextlib.suppress(RedisError, OSError):
            await self.exports.shutdown()
        await self.ray.close()  # after the exports: their tasks are cancelled on the cluster
        await self.jobs.close()
        self.store_health.close()
        await self.redis.aclose()
