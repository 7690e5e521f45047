"""Runs in: a Serve replica.

The Serve deployment of one served model: the ingress of its own application, so Serve's
HAProxy sends each request straight to a replica of it (no ingress hop, no handle call).

Each replica answers the whole v2 API of its model, gRPC (v2_servicer.py, plus grpc.health.v1)
and REST (v2_rest.py, on the app's route prefix /v2/models/<name>), with a predictor of every
version the model serves: a request naming a version goes to it, one without is drawn by the
traffic weights, and it is answered here (no hop to another version's replicas).

The versions, weights, predictor options and batching are the deployment's user_config (the
model's routing table, written by the controller): a change reconfigures every replica in
place. `reconfigure` loads the predictors of new versions in a thread while the current ones
keep answering, then swaps the table at once, so a rollout (a version added, the traffic
moved, a version removed) fails no request and restarts nothing; then it reports what it
serves (replica_state.py). A version that fails to load is left out and reported; if it was
served before, its previous predictor stays; if nothing weighted would be left, the whole
previous table stays.

The same class with no model (`model=""`) is the server app on the route prefix /v2: the
server-level REST resources (/v2/health/live|ready, /v2) and a NOT_FOUND for models nobody
serves.

Predictors run on the replica's event loop (in Serve's throughput-optimized mode, the loop its
gRPC and HTTP servers run on): no thread per request, one predictor per version (batches
included); metrics are tallied per request and handed to Ray once a second (metrics.py).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
from typing import Any

import numpy as np
from ray import serve

from paddleray.services.common.ray_connection import in_daemon_thread
from paddleray.services.exporter.serving import replica_state
from paddleray.services.exporter.serving.artifact import Signature, load_artifact
from paddleray.services.exporter.serving.dtypes import NUMPY_DTYPES
from paddleray.services.exporter.serving.replica import exclusive_ports
from paddleray.services.exporter.serving.replica.batching import dynamic_batching, merge, rows, split
from paddleray.services.exporter.serving.replica.dataplane import DataPlane, RoutedModel, RoutedVersion, describe
from paddleray.services.exporter.serving.replica.gpu import replica_gpu_env
from paddleray.services.exporter.serving.replica.metrics import FLUSH_INTERVAL_S, ServingMetrics
from paddleray.services.exporter.serving.replica.predictor import PLATFORMS, Predictor, load_predictor
from paddleray.services.exporter.serving.replica.v2_rest import handle
from paddleray.services.exporter.serving.replica.v2_servicer import V2Servicer
from paddleray.services.exporter.serving.spec import MODEL_DEPLOYMENT, PredictorOptions

logger = logging.getLogger(__name__)


class _Loaded:
    """A version's predictor, its signature and the runners (batch queues) made for it."""

    def __init__(self, predictor: Predictor, signature: Signature, platform: str) -> None:
        self.predictor, self.signature, self.platform = predictor, signature, platform
        self.runners: dict[tuple[int, float], Any] = {}


class ModelServer:
    def __init__(self, model: str = "", num_gpus: float = 0.0) -> None:
        # Before Serve starts this replica's direct-ingress servers (after the constructor).
        exclusive_ports.install()
        if num_gpus > 0:
            # Before Paddle is imported: device 0 is Ray's GPU, and a fraction caps its memory.
            import ray

            os.environ.update(replica_gpu_env(num_gpus, ray.get_gpu_ids()))
        self._model = model
        self.metrics = ServingMetrics()
        hint = (f": this endpoint's `application` is '{model}' (gRPC clients send the model's name as "
                "`application` metadata)") if model else ": no deployment serves it"
        self._plane = DataPlane(observe=self.metrics.request, not_found_hint=hint)
        self._servicer = V2Servicer(self._plane)
        self._loaded: dict[str, _Loaded] = {}
        self._keys: dict[str, str] = {}  # version -> the key of its predictor in _loaded
        self._routes: dict[str, RoutedVersion] = {}
        self._failed: dict[str, str] = {}
        self._generation = -1
        self._tasks: list[asyncio.Task] = []
        context = serve.get_replica_context()
        self._app, self._replica_id = context.app_name, context.replica_id.unique_id
        if not model:
            self._plane.swap({})  # the server app routes nothing and is ready at once

    # -- the model's routing table ----------------------------------------------------------
    async def reconfigure(self, config: dict[str, Any]) -> None:
        """config: {"generation", "timeout_s", "predictor", "batching", "versions": version ->
        {"artifact_dir", "backend", "weight"}}. Never raises: a reconfigure that raises takes the
        replica down, and the table it had would go with it."""
        if not self._tasks:
            self._tasks.append(asyncio.create_task(self._flush_metrics()))
        try:
            await self._apply(config)
        except Exception:  # noqa: BLE001 - keep serving the last table; the report says why
            logger.exception("routing table %s rejected; keeping %s", config.get("generation"), self._generation)
            self._failed = {"*": "the routing table could not be applied (see the replica's log)"}
        self._generation = int(config.get("generation", 0))
        await in_daemon_thread(self._report)

    async def _apply(self, config: dict[str, Any]) -> None:
        if not self._model:
            self._plane.known = frozenset(config.get("known") or ())
            return
        options = PredictorOptions(**(config.get("predictor") or {}))
        batching = config.get("batching") or {}
        batch = (int(batching.get("max_batch_size", 1)), float(batching.get("batch_wait_timeout_s", 0.0)))
        self._plane.timeout_s = float(config.get("timeout_s") or self._plane.timeout_s)
        loaded: dict[str, _Loaded] = {}
        keys: dict[str, str] = {}
        failed: dict[str, str] = {}
        for version, entry in sorted((config.get("versions") or {}).items()):
            key = json.dumps([entry["artifact_dir"], entry["backend"], options.__dict__], sort_keys=True)
            current = loaded.get(key) or self._loaded.get(key)
            if current is None:
                try:
                    current = await in_daemon_thread(functools.partial(self._load, entry["artifact_dir"], entry["backend"], options))
                except Exception as exc:  # noqa: BLE001 - reported; the others still load
                    failed[version] = describe(exc)
                    logger.error("version %s of %s did not load: %s", version, self._model, failed[version])
                    continue
            loaded[key], keys[version] = current, key
        routes: dict[str, RoutedVersion] = {}
        for version, entry in (config.get("versions") or {}).items():
            weight = float(entry.get("weight", 0.0))
            if version in keys:
                done = loaded[keys[version]]
                routes[version] = RoutedVersion(version, weight, done.signature, done.platform,
                                                self._runner(version, done, batch), suspends=batch[0] > 1)
            elif version in self._routes:  # failed to load again: its previous predictor stays
                old = self._routes[version]
                routes[version] = RoutedVersion(version, weight, old.signature, old.platform, old.runner,
                                                suspends=old.suspends)
                loaded[self._keys[version]], keys[version] = self._loaded[self._keys[version]], self._keys[version]
        if not any(v.weight > 0 for v in routes.values()) and self._routes:
            # Nothing that loaded could take the traffic: keep serving what served before.
            failed.setdefault("*", "no version that takes traffic loaded; the previous table is kept")
            self._failed = failed
            return
        self._plane.swap({self._model: RoutedModel(self._model, routes)} if routes else {})
        self._routes, self._loaded, self._keys, self._failed = routes, loaded, keys, failed
        self.metrics.serving(self._model, sorted(routes))

    def _load(self, artifact_dir: str, backend: str, options: PredictorOptions) -> _Loaded:
        artifact = load_artifact(artifact_dir)
        predictor = load_predictor(artifact, backend, options)
        specs = artifact.signature.inputs
        if all(t.datatype in NUMPY_DTYPES for t in specs):
            # One call before it takes traffic, so no client pays the first-run cost.
            predictor.predict({t.name: np.zeros(tuple(1 if d == -1 else d for d in t.shape), NUMPY_DTYPES[t.datatype])
                               for t in specs})
        return _Loaded(predictor, artifact.signature, PLATFORMS[backend])

    def _runner(self, version: str, loaded: _Loaded, batch: tuple[int, float]):
        """The version's predictor, called on this loop; batch queues outlive a table change."""
        if batch not in loaded.runners:
            predictor, model, metrics = loaded.predictor, self._model, self.metrics

            async def one(inputs):
                metrics.batch(model, version, rows(inputs) or 1)
                return predictor.predict(inputs)

            async def many(requests):
                merged, sizes = merge(requests)
                if merged is None:  # inputs whose non-batch dims differ: one by one
                    return [await one(r) for r in requests]
                metrics.batch(model, version, sum(sizes))
                return split(predictor.predict(merged), sizes)

            loaded.runners[batch] = dynamic_batching(one, many, *batch)
        return loaded.runners[batch]

    def _report(self) -> None:
        try:
            replica_state.publish(self._app, self._replica_id, {
                "generation": self._generation, "versions": sorted(self._routes), "failed": self._failed,
                "predictors": {v: self._loaded[k].predictor.predictors for v, k in self._keys.items()},
            })
        except Exception as exc:  # noqa: BLE001 - the controller waits and asks again
            logger.warning("could not report generation %s: %r", self._generation, exc)

    async def _flush_metrics(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_INTERVAL_S)
            try:
                self.metrics.flush()
            except Exception:  # noqa: BLE001 - metrics never take serving down
                logger.exception("metrics flush failed")

    # -- gRPC: Serve calls the method named after each RPC ---------------------------------------
    async def ServerLive(self, request, grpc_context):
        return await self._servicer.ServerLive(request, grpc_context)

    async def ServerReady(self, request, grpc_context):
        return await self._servicer.ServerReady(request, grpc_context)

    async def ServerMetadata(self, request, grpc_context):
        return await self._servicer.ServerMetadata(request, grpc_context)

    async def ModelReady(self, request, grpc_context):
        return await self._servicer.ModelReady(request, grpc_context)

    async def ModelMetadata(self, request, grpc_context):
        return await self._servicer.ModelMetadata(request, grpc_context)

    async def ModelInfer(self, request, grpc_context):
        return await self._servicer.ModelInfer(request, grpc_context)

    async def ModelStreamInfer(self, request_stream):
        async for response in self._servicer.ModelStreamInfer(request_stream):
            yield response

    async def Check(self, request, grpc_context):
        return await self._servicer.Check(request, grpc_context)

    async def Watch(self, request, grpc_context):
        async for response in self._servicer.Watch(request, grpc_context):
            yield response

    # -- REST -----------------------------------------------------------------------------------
    async def __call__(self, request):
        from starlette.responses import Response

        answer = await handle(self._plane, request.method, request.url.path, request.headers, await request.body())
        return Response(answer.body, status_code=answer.status, headers=answer.headers)

    async def __del__(self) -> None:
        for task in getattr(self, "_tasks", []):
            task.cancel()
        try:
            self.metrics.flush()
            await asyncio.wait_for(in_daemon_thread(functools.partial(replica_state.withdraw, self._app, self._replica_id)), 5)
        except Exception:  # noqa: BLE001 - the replica is going; the controller sweeps stale reports
            pass


def build(args: dict[str, Any]):
    # Wrapped here rather than decorated: mypy keeps a decorated class's own type, without .bind.
    return serve.deployment(ModelServer, name=MODEL_DEPLOYMENT).bind(**args)
