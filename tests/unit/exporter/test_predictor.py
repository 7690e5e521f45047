from __future__ import annotations

import threading

import numpy as np
import pytest

from paddleray.services.exporter.serving.artifact import load_artifact
from paddleray.services.exporter.serving.replica.predictor import PaddlePredictor, load_predictor
from paddleray.services.exporter.serving.spec import PredictorOptions
from support.serving import dynamic_forward


@pytest.mark.parametrize("mkldnn", [False, True])
def test_paddle_predictor_matches_the_dynamic_model(mlp_artifact, mkldnn):
    directory, model = mlp_artifact
    predictor = load_predictor(load_artifact(directory), "paddle", PredictorOptions(enable_mkldnn=mkldnn))
    for batch in (1, 7, 32):
        x = np.random.default_rng(batch).standard_normal((batch, 64)).astype(np.float32)
        out = predictor.predict({"x": x})["fetch_name_0"]
        assert out.shape == (batch, 10)
        np.testing.assert_allclose(out, dynamic_forward(model, x)[0], rtol=1e-5, atol=1e-5)


def test_several_inputs_and_outputs_of_different_dtypes(two_artifact):
    directory, model = two_artifact
    predictor = load_predictor(load_artifact(directory), "paddle", PredictorOptions())
    x = np.ones((3, 4), np.float32)
    n = np.array([[1], [2], [3]], np.int64)
    out = predictor.predict({"x": x, "n": n})
    ref_y, ref_m = dynamic_forward(model, x, n)
    assert out["m"].dtype == np.int64 and np.array_equal(out["m"], ref_m)
    np.testing.assert_allclose(out["y"], ref_y, rtol=1e-5, atol=1e-5)


def test_threads_get_their_own_predictor_and_right_answers(mlp_artifact):
    """A shared Paddle predictor returned wrong outputs under threads (50 of 1,200 measured);
    many threads with varying batch sizes must each get exactly the single-threaded answer."""
    predictor = PaddlePredictor(load_artifact(mlp_artifact[0]), PredictorOptions())
    rng = np.random.default_rng(0)
    cases = [rng.standard_normal((int(rng.integers(1, 33)), 64)).astype(np.float32) for _ in range(24)]
    reference = [predictor.predict({"x": x})["fetch_name_0"] for x in cases]
    wrong: list[int] = []
    barrier = threading.Barrier(8)

    def worker(offset: int) -> None:
        barrier.wait()
        for k in range(150):
            i = (offset * 7 + k) % len(cases)
            out = predictor.predict({"x": cases[i]})["fetch_name_0"]
            if out.shape != reference[i].shape or not np.array_equal(out, reference[i]):
                wrong.append(i)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


def test_a_new_thread_per_call_makes_no_predictor(mlp_artifact):
    """Ray Serve runs synchronous methods on a new thread per call (anyio.to_thread under a loop
    with no root task): a per-thread clone was made for every request (48 ms of CPU each on a
    wide model). Predictors grow with concurrent calls, never with threads or requests."""
    predictor = PaddlePredictor(load_artifact(mlp_artifact[0]), PredictorOptions())
    x = np.ones((1, 64), np.float32)
    for _ in range(20):
        thread = threading.Thread(target=predictor.predict, args=({"x": x},))
        thread.start()
        thread.join()
    assert predictor.predictors == 1

    barrier = threading.Barrier(4)

    def together() -> None:
        barrier.wait()
        for _ in range(30):
            predictor.predict({"x": x})

    threads = [threading.Thread(target=together) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    made = predictor.predictors
    assert 1 <= made <= 4
    for _ in range(20):  # the pool is reused by later threads
        thread = threading.Thread(target=predictor.predict, args=({"x": x},))
        thread.start()
        thread.join()
    assert predictor.predictors == made


def test_unknown_backend(mlp_artifact):
    from paddleray.services.common.errors import FailedPrecondition

    with pytest.raises(FailedPrecondition, match="onnx model"):
        load_predictor(load_artifact(mlp_artifact[0]), "onnx", PredictorOptions())


def test_onnx_runtime_matches_the_dynamic_model(tmp_path, monkeypatch):
    import subprocess

    from support.serving import export_model

    started: list = []
    real_popen = subprocess.Popen

    def watched(args, *a, **kw):  # paddle2onnx's default polygraphy pass pip-installs packages
        started.append(args)
        return real_popen(args, *a, **kw)

    monkeypatch.setattr(subprocess, "Popen", watched)
    directory, model = export_model(tmp_path / "v1", "mlp", onnx=True)
    assert not [a for a in started if "pip" in " ".join(map(str, a if isinstance(a, list | tuple) else [a]))], \
        f"the ONNX conversion ran pip at run time: {started}"
    artifact = load_artifact(directory)
    assert artifact.has_backend("onnx")
    predictor = load_predictor(artifact, "onnx", PredictorOptions())
    for batch in (1, 9):
        x = np.random.default_rng(batch).standard_normal((batch, 64)).astype(np.float32)
        np.testing.assert_allclose(
            predictor.predict({"x": x})["fetch_name_0"], dynamic_forward(model, x)[0], rtol=1e-5, atol=1e-5
        )
