"""Runs in: a Serve replica and the export Ray task (validation goes through the same predictor).

Predictors: Paddle Inference and ONNX Runtime behind one call, safe to call from many threads.

A Paddle predictor shared between threads returns silently wrong outputs (measured: 50 of
1,200 calls), so PaddlePredictor lends each call a predictor no other call holds, from a pool
that grows only when every predictor is busy (a `clone()`: clones share the weights). The pool
is sized by concurrency, not by threads: a per-thread clone was rebuilt on every request where
the caller runs each call on a new thread, as Ray Serve does for synchronous methods
(anyio.to_thread.run_sync under a loop run with run_forever() finds no root task and ends its
worker thread with each call: 20 sequential calls ran on 20 threads), 48 ms of CPU per request
on a wide model. ONNX Runtime sessions are safe to run from several threads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol

import numpy as np

from paddleray.services.common.errors import FailedPrecondition
from paddleray.services.exporter.serving.artifact import Artifact
from paddleray.services.exporter.serving.dtypes import NUMPY_DTYPES
from paddleray.services.exporter.serving.spec import PredictorOptions

PLATFORMS = {"paddle": "paddle_inference", "onnx": "onnxruntime_onnx"}


class Predictor(Protocol):
    backend: str
    # Predictor instances made so far (1 for a backend that shares one across threads).
    predictors: int

    def predict(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs by the manifest's output names."""


def paddle_config(artifact: Artifact, options: PredictorOptions):
    """The Paddle Inference config for these options (the exporter validates with the same one)."""
    from paddle import inference

    config = inference.Config(str(artifact.paddle_program), str(artifact.paddle_params))
    # Without this each create_predictor prints ~43 lines of PIR passes.
    config.disable_glog_info()
    if options.use_gpu:
        import paddle

        if not paddle.is_compiled_with_cuda():
            raise FailedPrecondition("predictor.use_gpu: this replica runs a CPU build of Paddle")
        # Ray narrows CUDA_VISIBLE_DEVICES to the replica's GPU, so it is device 0.
        config.enable_use_gpu(256, 0)
        if options.enable_tensorrt:
            config.enable_tensorrt_engine(workspace_size=1 << 30, max_batch_size=1, min_subgraph_size=3)
    else:
        config.disable_gpu()
        config.set_cpu_math_library_num_threads(options.cpu_math_threads)
        if options.enable_mkldnn:
            config.enable_mkldnn()
        else:
            config.disable_mkldnn()
    # enable_memory_optim() is not called: it fails create_predictor for PIR (.json) programs
    # in Paddle 3.3.1 ("Not find predictor_id N and pass_name memory_optimize_pass").
    return config


class PaddlePredictor:
    backend = "paddle"

    def __init__(self, artifact: Artifact, options: PredictorOptions) -> None:
        from paddle import inference

        self._artifact = artifact
        self._base = inference.create_predictor(paddle_config(artifact, options))
        self._input_names = set(self._base.get_input_names())
        missing = {t.name for t in artifact.signature.inputs} - self._input_names
        if missing:
            raise FailedPrecondition(f"artifact {artifact.root}: the program has no input {sorted(missing)}")
        self._fetch = dict(zip(artifact.predictor_outputs, (t.name for t in artifact.signature.outputs), strict=True))
        unknown = set(self._fetch) - set(self._base.get_output_names())
        if unknown:
            raise FailedPrecondition(f"artifact {artifact.root}: the program has no output {sorted(unknown)}")
        # Predictors no call holds (the pool); `predictors` counts every one made.
        self._idle = [self._base]
        self.predictors = 1
        self._lock = threading.Lock()

    @contextmanager
    def _lend(self) -> Iterator:
        with self._lock:
            if self._idle:
                predictor = self._idle.pop()
            else:
                predictor = self._base.clone()
                self.predictors += 1
        try:
            yield predictor
        finally:
            with self._lock:
                self._idle.append(predictor)

    def predict(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self._lend() as predictor:
            for name, array in inputs.items():
                handle = predictor.get_input_handle(name)
                handle.reshape(list(array.shape))
                handle.copy_from_cpu(np.ascontiguousarray(array))
            predictor.run()
            return {out: predictor.get_output_handle(fetch).copy_to_cpu() for fetch, out in self._fetch.items()}


class OnnxPredictor:
    backend = "onnx"
    predictors = 1

    def __init__(self, artifact: Artifact, options: PredictorOptions) -> None:
        if artifact.onnx_model is None:
            raise FailedPrecondition(f"backend onnx: artifact {artifact.root} has no onnx model")
        try:
            import onnxruntime as ort
        except ImportError:
            raise FailedPrecondition("backend onnx: onnxruntime is not installed (the 'onnx' extra)") from None
        so = ort.SessionOptions()
        # One intra-op thread measured fastest on these small models (2 threads: up to 2.7x slower).
        so.intra_op_num_threads = options.cpu_math_threads
        so.inter_op_num_threads = 1
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if options.use_gpu else ["CPUExecutionProvider"]
        self._session = ort.InferenceSession(str(artifact.onnx_model), so, providers=providers)
        session_outputs = [o.name for o in self._session.get_outputs()]
        # paddle2onnx keeps Paddle's fetch names; fall back to position when it does not.
        if set(artifact.predictor_outputs) <= set(session_outputs):
            fetch = list(artifact.predictor_outputs)
        else:
            fetch = session_outputs[: len(artifact.signature.outputs)]
        self._fetch = fetch
        self._names = [t.name for t in artifact.signature.outputs]
        self._dtypes = {t.name: NUMPY_DTYPES.get(t.datatype) for t in artifact.signature.inputs}

    def predict(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        feed = {name: np.ascontiguousarray(array) for name, array in inputs.items()}
        results = self._session.run(self._fetch, feed)
        return dict(zip(self._names, results, strict=True))


def load_predictor(artifact: Artifact, backend: str, options: PredictorOptions) -> Predictor:
    if backend == "paddle":
        return PaddlePredictor(artifact, options)
    if backend == "onnx":
        return OnnxPredictor(artifact, options)
    raise FailedPrecondition(f"backend {backend!r}: not one of paddle, onnx")
