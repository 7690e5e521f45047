"""The Serve deployment of one model version: a predictor answering one request or a batch.

Its application is built from the declarative config (serve_config.model_app) by `build`.
It answers two ways:
- the Serve ingress's handle calls (`infer`, `infer_many`). Dynamic batching of those happens
  in the ingress, before the handle hop: a hop costs several ms of CPU per call on this stack
  (SERVING_FACTS.md §5), far more than small models compute, so one hop per batch instead of
  per request is what lets batching pay;
- with a direct port, its own v2 endpoint (replica_endpoint.py), once the model's routing
  table (this app's user_config, written by the controller with the ingress's) routes its
  version here. It answers its version with the local predictor, batching here, and forwards
  the model's other versions through a handle, with the same weights as the ingress.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import numpy as np
from ray import serve

from paddleray.services.exporter.serving import metrics
from paddleray.services.exporter.serving.artifact import load_artifact
from paddleray.services.exporter.serving.batching import dynamic_batching, merge, rows, split
from paddleray.services.exporter.serving.codec import NUMPY_DTYPES
from paddleray.services.exporter.serving.dataplane import DataPlane
from paddleray.services.exporter.serving.gpu import replica_gpu_env
from paddleray.services.exporter.serving.ingress import build_routes, handle_runner
from paddleray.services.exporter.serving.predictor import load_predictor
from paddleray.services.exporter.serving.replica_endpoint import ReplicaEndpoint
from paddleray.services.exporter.serving.serve_config import MODEL_DEPLOYMENT
from paddleray.services.exporter.serving.spec import PredictorOptions
from paddleray.services.exporter.serving.v2_servicer import V2Servicer

logger = logging.getLogger(__name__)


class ModelServer:
    def __init__(self, artifact_dir: str, backend: str, predictor: dict, num_gpus: float, model: str, version: str,
                 direct_host: str = "", direct_port: int = 0):
        if num_gpus > 0:
            # Before Paddle is imported: device 0 is Ray's GPU, and a fraction caps its memory.
            import ray

            os.environ.update(replica_gpu_env(num_gpus, ray.get_gpu_ids()))
        self._artifact = load_artifact(artifact_dir)
        self._predictor = load_predictor(self._artifact, backend, PredictorOptions(**predictor))
        self._batch_size = metrics.batch_size_histogram(model, version)
        self._warm_up()
        self._model, self._version = model, version
        self._direct = (direct_host, direct_port) if direct_port else None
        self._endpoint: ReplicaEndpoint | None = None
        self._endpoint_error = ""
        self._plane = DataPlane(observe=metrics.record_request)
        self._runners: dict[tuple, Any] = {}
        self._generation = -1
        metrics.replica_up(model, version)

    def _warm_up(self) -> None:
        """One call before the replica reports ready, so no client pays the first-run cost."""
        specs = self._artifact.signature.inputs
        if all(t.datatype in NUMPY_DTYPES for t in specs):
            self._predictor.predict(
                {t.name: np.zeros(tuple(1 if d == -1 else d for d in t.shape), NUMPY_DTYPES[t.datatype]) for t in specs}
            )

    def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self._batch_size.observe(rows(inputs) or 1)
        return self._predictor.predict(inputs)

    def infer_many(self, requests: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """A batch the ingress collected (ingress.py): one predictor call for all its rows."""
        merged, sizes = merge(requests)
        if merged is None:
            # Inputs whose non-batch dims differ cannot be stacked: run them one by one.
            return [self.infer(r) for r in requests]
        self._batch_size.observe(sum(sizes))
        return split(self._predictor.predict(merged), sizes)

    async def reconfigure(self, config: dict[str, Any]) -> None:
        """The model's routing table: {"generation", "timeout_s", "versions": version -> route entry}."""
        # Captured here: Serve runs reconfigure on the loop its handles belong to.
        serve_loop = asyncio.get_running_loop()
        me = serve.get_replica_context().app_name
        table = dict(config.get("versions") or {})
        try:
            routes = build_routes({self._model: table}, lambda entry: self._runner(entry, me, serve_loop))
        except Exception:
            # Raising here would take the app down (as the ingress's): keep the last table.
            logger.exception("routing table of generation %s rejected; keeping %s", config.get("generation"), self._generation)
            return
        self._plane.timeout_s = float(config.get("timeout_s") or self._plane.timeout_s)
        self._plane.swap(routes)
        live = {id(v.runner) for m in routes.values() for v in m.versions.values()}
        self._runners = {k: r for k, r in self._runners.items() if id(r) in live}
        await self._follow_table((table.get(self._version) or {}).get("app") == me, bool(config.get("drain_unrouted")))
        # Last: the controller reads the generation as "this replica's endpoint follows it",
        # listening or drained (it deletes a drained app next).
        self._generation = int(config.get("generation", 0))

    async def _follow_table(self, routed_here: bool, drain_unrouted: bool) -> None:
        """Listens once the table routes this version here (a staged replica, of a version being
        replaced or not yet taking traffic, takes no connection before); closes once it does not."""
        if self._endpoint is not None and not routed_here and drain_unrouted:
            # Replaced or removed: the replicas taking this one's clients listen already.
            endpoint, self._endpoint = self._endpoint, None
            await endpoint.stop()
            # Its batch queues belong to the stopped endpoint's loop.
            self._runners = {}
        if self._direct is not None and self._endpoint is None and routed_here:
            endpoint = ReplicaEndpoint(V2Servicer(self._plane), *self._direct, serving_name=self._model)
            try:
                await asyncio.to_thread(endpoint.start)
            except Exception as exc:  # noqa: BLE001 - reported by check_health, which restarts the replica
                self._endpoint_error = str(exc)
                logger.error("%s", exc)
                return
            self._endpoint, self._endpoint_error = endpoint, ""

    def _runner(self, entry: dict[str, Any], me: str, serve_loop: asyncio.AbstractEventLoop):
        batch = (int(entry.get("max_batch_size", 1)), float(entry.get("batch_wait_timeout_s", 0.0)))
        key = (entry["app"], *batch)
        if key not in self._runners:
            self._runners[key] = self._local_runner(*batch) if entry["app"] == me else _on_loop(
                handle_runner(entry["app"], *batch), serve_loop)
        return self._runners[key]

    def _local_runner(self, max_batch_size: int, batch_wait_timeout_s: float):
        """This replica's predictor, called on the endpoint's loop (as the direct baseline does)."""

        async def one(inputs):
            return self.infer(inputs)

        async def many(requests):
            return self.infer_many(requests)

        return dynamic_batching(one, many, max_batch_size, batch_wait_timeout_s)

    def generation(self) -> int:
        return self._generation

    def check_health(self) -> None:
        """Serve calls it periodically; raising restarts the replica and shows the reason."""
        if self._endpoint_error:
            raise RuntimeError(self._endpoint_error)

    async def __del__(self) -> None:
        # Serve awaits it when the replica goes, after draining its own requests: drain ours.
        # Awaited, not blocking: the calls being drained may be forwards to another version,
        # which run on this (Serve's) loop.
        endpoint = getattr(self, "_endpoint", None)
        if endpoint is not None:
            self._endpoint = None
            await endpoint.stop()


def _on_loop(runner, loop: asyncio.AbstractEventLoop):
    """A runner awaited from the endpoint's loop, run on Serve's (where handles live)."""

    async def run(inputs):
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(runner(inputs), loop))

    return run


def build(args: dict[str, Any]):
    # Wrapped here rather than decorated: mypy keeps a decorated class's own type, without .bind.
    return serve.deployment(ModelServer, name=MODEL_DEPLOYMENT).bind(**args)
