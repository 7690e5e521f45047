"""The Serve deployment of one model version: a predictor answering one request or a batch.

Its application is built from the declarative config (serve_config.model_app) by `build`.
Dynamic batching happens in the ingress, before the handle hop: a hop costs several ms of CPU
per call on this stack (SERVING_FACTS.md §5), far more than small models compute, so one hop
per batch instead of per request is what lets batching pay.
"""

from __future__ import annotations

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


class ModelServer:
    def __init__(self, artifact_dir: str, backend: str, predictor: dict, num_gpus: float, model: str, version: str):
        if num_gpus > 0:
            # Before Paddle is imported: device 0 is Ray's GPU, and a fraction caps its memory.
            import ray

            os.environ.update(replica_gpu_env(num_gpus, ray.get_gpu_ids()))
        self._artifact = load_artifact(artifact_dir)
        self._predictor = load_predictor(self._artifact, backend, PredictorOptions(**predictor))
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


def build(args: dict[str, Any]):
    # Wrapped here rather than decorated: mypy keeps a decorated class's own type, without .bind.
    return serve.deployment(ModelServer, name=MODEL_DEPLOYMENT).bind(**args)
