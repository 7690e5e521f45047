"""The text-line recognizer (conv + BiLSTM + CTC, any width) all the way through the real stack,
issue 19's story for it: examples/text_lines_sweep.yaml (ASHA, 2 ranks a trial) -> a 2-rank
fine-tune of examples/text_lines_job.yaml from the best trial (init_from) -> the same fine-tune
again on the warm workers that run left, failing once after epoch 2 (config.fail_once_after_epoch):
its retry resumes from its checkpoint and ends with the uninterrupted run's figures, to the bit ->
exported with a dynamic width to Paddle Inference and ONNX, validated at several widths ->
deployed with dynamic batching -> lines it never saw, read back through the v2 API (SDK, CLI,
stock tritonclient) and decoded on the client with the charset the version records; the served
probabilities equal the job's own dynamic model on the same lines -> undeployed and deleted.

The training is shared: the sweep's best trial is the model's training from scratch (12 epochs),
the fine-tunes add 3, where the test of the export alone trained 15 from scratch."""

from __future__ import annotations

import json
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
import yaml

from paddleray.services.client import Client, ServiceError
from paddleray.services.trainer.examples import crnn, loop, text_lines
from paddleray.trainer.v1 import trainer_service_pb2, trainer_service_pb2_grpc
from support.cli import created, ok, ok_json
from support.triton import triton_python

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
EXAMPLES = Path(__file__).parents[3] / "examples"
SPEC = EXAMPLES / "text_lines_job.yaml"
SWEEP = EXAMPLES / "text_lines_sweep.yaml"
MODEL = "cli-text-lines"
HELD_OUT = 64
WIDTHS = (24, 64, 112, 200)
# Fine-tuning a trained model: a fifth of the sweep's learning rate refines it, a fresh optimizer
# at the full rate would undo part of it first.
FINE_TUNE = {"epochs": 3, "lr": 0.001}
COMPARED = ("epoch", "loss", "val_loss", "accuracy", "cer", "samples")
TRITON_READS_A_LINE = """
import json, sys
import numpy as np
import tritonclient.grpc as triton
url, model, path = sys.argv[1:]
line = np.load(path)
request = triton.InferInput("x", list(line.shape), "FP32")
request.set_data_from_numpy(line)
result = triton.InferenceServerClient(url=url).infer(model, [request], headers={"application": model})
print(json.dumps(result.as_numpy("fetch_name_0").tolist()))
"""


@pytest.fixture
def client(cli_stack):
    with Client.connect(address=cli_stack.address("scheduler"), state_dir=cli_stack.state_dir) as connected:
        yield connected
        try:  # never a deployment left behind: Serve replicas hold the stack's CPUs
            connected.exporter.delete_deployment(MODEL)
            connected.exporter.wait_deleted(MODEL, timeout=180)
        except ServiceError:
            pass


def _fine_tune_spec(path: Path, best_trial: str, **config) -> Path:
    """examples/text_lines_job.yaml as a user edits it to fine-tune from a trial (retries: 1 kept)."""
    spec = yaml.safe_load(SPEC.read_text())
    spec.update(init_from=best_trial, display_name=f"text-line fine-tune from {best_trial}")
    spec["config"].update(FINE_TUNE, **config)
    path.write_text(yaml.safe_dump(spec, allow_unicode=True))
    return path


def _warm_ranks(cli_stack, run: str) -> list[bool]:
    """Whether each rank of the trainer run came warm from the pool, as the trainer recorded it."""
    with grpc.insecure_channel(cli_stack.address("trainer")) as channel:
        stub = trainer_service_pb2_grpc.TrainerServiceStub(channel)
        shown = stub.GetRun(trainer_service_pb2.GetRunRequest(name=run), timeout=30).run
    return [worker.warm for worker in shown.workers]


def test_text_lines_sweep_fine_tune_retry_export_at_any_width_serve_and_read_unseen_lines(
        serving_cli, client, cli_stack, tmp_path):
    cli = serving_cli
    timings = {}

    # The sweep: lr 0.005 first, then lr 0.0002, which ASHA stops at its first rung.
    started = time.perf_counter()
    experiment = ok_json(cli("experiments", "get", created(cli("sweep", str(SWEEP), "--watch")), "-o", "json"))
    timings["sweep"] = time.perf_counter() - started
    assert experiment["state"] == "EXPERIMENT_STATE_SUCCEEDED", experiment
    trials = {json.loads(t["trial_parameters"]["lr"]): t for t in experiment["trials"]}
    assert set(trials) == {0.005, 0.0002}
    pruned, best = trials[0.0002], trials[0.005]
    assert pruned["state"] == "JOB_STATE_EARLY_STOPPED", pruned
    assert "asha: val_loss=" in pruned["failure"]["message"] and "at rung 1" in pruned["failure"]["message"], pruned
    assert best["latest_metrics"]["metrics"]["epoch"] == 12 and experiment["best_trial"]["job"] == best["name"]
    sweep_logs = cli("logs", best["name"]).stdout
    assert "crnn: rank 0/2" in sweep_logs and "crnn: rank 1/2" in sweep_logs, sweep_logs

    # A 2-rank fine-tune from the best trial, uninterrupted...
    started = time.perf_counter()
    tuned = ok_json(cli("jobs", "get", created(cli("submit", str(_fine_tune_spec(tmp_path / "tune.yaml", best["name"])),
                                                   "--watch")), "-o", "json"))
    timings["fine_tune"] = time.perf_counter() - started
    baseline = tuned["spec"]["init_from"]["resolved_uri"]
    assert best["attempts"][-1]["run"].removeprefix("runs/") in baseline, (baseline, best["attempts"])
    tune_logs = cli("logs", tuned["name"]).stdout
    assert "crnn: rank 0 starts from the weights in" in tune_logs and baseline.rstrip("/").rpartition("/")[2] in tune_logs

    # ...and again on the warm workers it left, failing once after epoch 2: the retry resumes
    # from that epoch's checkpoint on fresh workers and ends where the uninterrupted run ended.
    started = time.perf_counter()
    faulty = _fine_tune_spec(tmp_path / "faulty.yaml", best["name"], fail_once_after_epoch=2)
    retried = ok_json(cli("jobs", "get", created(cli("submit", str(faulty), "--watch")), "-o", "json"))
    timings["fine_tune_with_retry"] = time.perf_counter() - started
    job = retried["name"]
    first, second = retried["attempts"]
    assert (first["state"], second["state"]) == ("JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED"), retried["attempts"]
    assert "injected failure after epoch 2 (config.fail_once_after_epoch)" in first["failure"]["message"], first
    assert _warm_ranks(cli_stack, first["run"]) == [True, True], "the failing attempt ran on warm workers"
    assert int(second["resumed_from"]["epoch"]) == 2, second
    ours, uninterrupted = retried["latest_metrics"]["metrics"], tuned["latest_metrics"]["metrics"]
    assert {k: ours[k] for k in COMPARED} == {k: uninterrupted[k] for k in COMPARED}, (ours, uninterrupted)
    metrics = ours
    config = yaml.safe_load(faulty.read_text())["config"]
    assert metrics["epoch"] == config["epochs"] and metrics["accuracy"] >= 0.9, metrics

    started = time.perf_counter()
    # Validated at the widths of the lines (24-112 columns) and beyond.
    exported = ok(cli("models", "export", "--job", job, "--model", MODEL, "--format", "onnx",
                      "--dynamic-sizes", ",".join(map(str, WIDTHS)), "--wait"))
    timings["export"] = time.perf_counter() - started
    for width in WIDTHS:  # the per-sample table: each width checked on each backend
        assert f"x [4, 1, 32, {width}]" in exported.stdout, exported.stdout
    version = ok_json(cli("models", "get", f"{MODEL}/versions/1", "-o", "json"))
    assert version["state"] == "MODEL_VERSION_STATE_READY", version
    assert version["inputs"] == [{"name": "x", "datatype": "DATA_TYPE_FP32", "shape": ["-1", "1", "32", "-1"]}]
    # Time steps follow the width: -1, not the size one probe happened to give.
    assert version["outputs"][0]["shape"] == ["-1", "-1", str(len(config["charset"]) + 1)]
    charset = version["metadata"]["charset"]
    assert charset == config["charset"] and version["metadata"]["decoder"] == "ctc_greedy"
    figures = {}
    for backend in version["validation"]["backends"]:
        assert backend["passed"], backend
        widths = [int(s["inputs"][0]["shape"][3]) for s in backend["samples"]]
        assert widths == list(WIDTHS)
        figures[backend["backend"]] = {w: s.get("max_abs_error", 0.0)
                                       for w, s in zip(widths, backend["samples"], strict=True)}
    assert set(figures) == {"BACKEND_PADDLE_INFERENCE", "BACKEND_ONNX_RUNTIME"}

    started = time.perf_counter()
    ok(cli("deployments", "create", MODEL, "--model", MODEL, "--version", "1", "--cpus", "0.1",
            "--max-batch-size", "8", "--batch-wait-ms", "5", "--wait"))
    timings["deploy"] = time.perf_counter() - started
    texts, lines = crnn.held_out(config, HELD_OUT)
    inference = client.inference(MODEL)

    # One request of every line, right-padded to the widest: the client's batching.
    batch = text_lines.to_batch(lines)
    probs = inference.infer(MODEL, {"x": batch})["fetch_name_0"]
    assert probs.shape == (HELD_OUT, batch.shape[-1] // text_lines.WIDTH_STEP, len(charset) + 1)
    read = text_lines.ctc_greedy_decode(probs, charset)
    accuracy = np.mean([a == b for a, b in zip(read, texts, strict=True)])
    assert accuracy >= 0.9, list(zip(texts, read, strict=True))

    # Each line alone at its own width, concurrently: what the server batches (same widths) or
    # runs apart (different widths) reads as the padded batch did.
    started = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        alone = list(pool.map(lambda line: inference.infer(MODEL, {"x": text_lines.to_batch([line])})["fetch_name_0"],
                              lines))
    timings["per_line_ms"] = (time.perf_counter() - started) / HELD_OUT * 1e3
    assert [text_lines.ctc_greedy_decode(p, charset)[0] for p in alone] == read

    one = {"x": text_lines.to_batch(lines[:1])}
    latencies = []
    for _ in range(20):
        started = time.perf_counter()
        inference.infer(MODEL, one)
        latencies.append(time.perf_counter() - started)
    timings["one_line_p50_ms"] = float(np.median(latencies)) * 1e3

    # The CLI reads a line too.
    np.save(tmp_path / "line.npy", text_lines.to_batch(lines[:1]))
    shown = ok_json(cli("predict", MODEL, "--input", f"x=@{tmp_path / 'line.npy'}", "-o", "json"))
    [out] = shown["outputs"]
    assert text_lines.ctc_greedy_decode(np.asarray(out["data"]).reshape(out["shape"]), charset) == read[:1]

    # A stock v2 client (tritonclient, in a venv of its own) reads a line too.
    endpoint = ok_json(cli("deployments", "get", MODEL, "-o", "json"))["endpoint"]
    triton = subprocess.run([triton_python(), "-c", TRITON_READS_A_LINE, endpoint, MODEL, str(tmp_path / "line.npy")],
                            capture_output=True, text=True, timeout=300)
    assert triton.returncode == 0, triton.stderr[-3000:]
    from_triton = np.asarray(json.loads(triton.stdout.strip().splitlines()[-1]), np.float32)
    assert text_lines.ctc_greedy_decode(from_triton, charset) == read[:1]

    # The served model is the job's own dynamic model: same probabilities on the same lines.
    import paddle

    checkpoint = Path(ok_json(cli("jobs", "get", job, "-o", "json"))["latest_checkpoint"]["uri"].removeprefix("file://"))
    with paddle.utils.unique_name.guard():
        model = crnn.build_model(config)
    loop.load_checkpoint(checkpoint, model)
    model.eval()
    with paddle.no_grad():
        dynamic = model(paddle.to_tensor(batch)).numpy()
    served_vs_dynamic = float(np.abs(probs - dynamic).max())
    assert served_vs_dynamic < 1e-4
    gone = ok(cli("deployments", "delete", MODEL, "--wait"))
    assert f"deployments/{MODEL} deleted" in gone.stdout
    assert f"deleted models/{MODEL}" in ok(cli("models", "delete", MODEL)).stdout
    latency = {b["backend"]: b["median_latency"] for b in version["validation"]["backends"]}
    print(f"\ntext lines: {timings}, sweep {[(lr, t['state'], t['latest_metrics']['metrics']) for lr, t in trials.items()]}, "
          f"job metrics {metrics}, held-out exact {accuracy:.3f}, validation max abs "
          f"per width {figures}, validation median latency {latency}, served vs dynamic {served_vs_dynamic:.2e}")
