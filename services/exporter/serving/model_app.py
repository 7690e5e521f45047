"""The Serve deployment of one model version: a predictor, optionally behind @serve.batch.

Its application is built from the declarative config (serve_config.model_app) by `build`.
Batching settings arrive as user_config, so changing them reconfigures the replica in place.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import numpy as np
from ray import serve

from paddleray.services.exporter.serving import metrics
from paddleray.services.exporter.serving.artifact import load_artifact
from paddleray.services.exporter.serving.batching import merge, rows, split
from paddleray.services.exporter.serving.codec import NUMPY_DTYPES
from paddleray.services.exporter.serving.gpu import replica_gpu_env
from paddleray.services.exporter.serving.predictor import load_predictor
from paddleray.services.exporter.serving.serve_config import MODEL_DEPLOYMENT
from paddleray.services.exporter.serving.spec import PredictorOptions


@serve.deployment(name=MODEL_DEPLOYMENT)
class ModelServer:
    def __init__(self, artifact_dir: str, backend: str, predictor: dict, num_gpus: float, model: str, version: str):
        if num_gpus > 0:
            # Before Paddle is imported: device 0 is Ray's GPU, and a fraction caps its memory.
            import ray

            os.environ.update(replica_gpu_env(num_gpus, ray.get_gpu_ids()))
        self._artifact = load_artifact(artifact_dir)
        self._predictor = load_predictor(self._artifact, backend, PredictorOptions(**predictor))
        self._max_batch_size = 1
        self._batch_size = metrics.batch_size_histogram(model, version)
        self._warm_up()
        metrics.replica_up(model, version)

    def _warm_up(self) -> None:
        """One call before the replica reports ready, so no client pays the first-run cost."""
        specs = self._artifact.signature.inputs
        if all(t.datatype in NUMPY_DTYPES for t in specs):
            self._predictor.predict(
                {t.name: np.zeros(tuple(1 if d == -1 else d for d in t.shape), NUMPY_DTYPES[t.datatype]) for t in specs}
            )

    def reconfigure(self, config: dict[str, Any]) -> None:
        self._max_batch_size = int(config.get("max_batch_size", 1))
        self._batched.set_max_batch_size(max(self._max_batch_size, 1))
        self._batched.set_batch_wait_timeout_s(float(config.get("batch_wait_timeout_s", 0.0)))

    async def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = rows(inputs)
        if self._max_batch_size <= 1 or n is None or n >= self._max_batch_size:
            self._batch_size.observe(n or 1)
            return self._predictor.predict(inputs)
        return await self._batched(inputs)

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.0, batch_size_fn=lambda items: sum(rows(i) or 1 for i in items))
    async def _batched(self, requests: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        merged, sizes = merge(requests)
        if merged is None:
            # Inputs whose non-batch dims differ cannot be stacked: run them one by one.
            self._batch_size.observe(1)
            return [self._predictor.predict(r) for r in requests]
        self._batch_size.observe(sum(sizes))
        # Off the event loop, so the next batch fills while this one computes.
        outputs = await asyncio.to_thread(self._predictor.predict, merged)
        return split(outputs, sizes)


def build(args: dict[str, Any]):
    return ModelServer.bind(**args)
