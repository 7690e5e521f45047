"""python -m bench serving: what serving costs, and what its choices buy.

static_vs_dygraph / paddle_inference_vs_dygraph: batch-1 latency of the dynamic-graph forward
(paddle.to_tensor -> model -> numpy, no_grad, eval) over the served backend's predict on the
exported model (ONNX Runtime when onnxruntime is installed and it matches the dynamic model,
else Paddle Inference) and over Paddle Inference (oneDNN off) alone; one process, one thread,
per round the median of `calls` calls of each, alternating.

batching_gain: ModelInfer rps at 32 concurrent clients (bs 1, a separate load process) through
the Serve ingress to the wide model (64-2048x2-10, Paddle Inference with oneDNN, tens of ms a
request) deployed twice side by side: with dynamic batching (32 rows, WIDE_BATCH_WAIT_S; the
ingress stacks concurrent requests and makes one handle call per batch) over without.

serve_vs_direct: the same load on the digits MLP through the deployment's own endpoint (its
Serve replica's grpc.aio server: serving/replica_endpoint.py) over a minimal grpc.aio server
(bench/serving_direct.py) around the same predictor and data plane, run at the niceness Ray
gives its workers (as the replicas run), with batching off as deployed by default. Through Serve's gRPC proxy and ingress instead: proxy_vs_direct (and with
batching on, 32 rows, 2 ms: serve_batched_vs_direct). The server CPU per request of each Serve
process (proxy, ingress, model replica) is reported from /proc, which is where the time goes.
endpoint_batching_gain: batching_gain's loads on the wide model's own endpoints (batching in
the replica).

rollout_failed_requests: failed requests of a 32-client load through the proxy running through
three rollouts (a new version beside the old one, a 50/50 traffic move, the old version
removed); endpoint_rollout_*: the same for a second load on the model's own endpoint at the same
time. The longest latency seen during them is the stall. cold_first_request_ms: the first
request pinned to a version just deployed.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import harness, serving_models

REPO = Path(__file__).resolve().parent.parent
TARGETS = {
    "static_vs_dygraph": ">= 5.0",
    "paddle_inference_vs_dygraph": ">= 2.5",
    "batching_gain": ">= 2.0",
    "serve_vs_direct": ">= 0.6",
}
CONCURRENCY = 32
# How long the ingress waits to fill a batch of the wide model. Requests reach it one per 1.5-3 ms
# of proxy CPU, so 32 of them arrive over 50-100 ms: a shorter wait sends batches of a few rows.
# Measured here (32 clients, 2 rounds): 5 ms 2.1-2.2x the unbatched throughput, 20 ms 3.9-5.0x,
# 50 ms 5.5-8.5x (and p50 latency 0.36-0.54 s against 2.5-3.0 s unbatched).
WIDE_BATCH_WAIT_S = 0.05


def _params(quick: bool, smoke: bool) -> dict:
    if smoke:
        return {"rounds": 1, "calls": 30, "trial_s": 1.0}
    return {"rounds": 3, "calls": 300, "trial_s": 2.0} if quick else {"rounds": 5, "calls": 1000, "trial_s": 4.0}


def _median_latency(fn, calls: int) -> float:
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def latency_part(root: Path, p: dict) -> dict:
    import paddle

    from paddleray.services.exporter.serving.artifact import load_artifact
    from paddleray.services.exporter.serving.predictor import load_predictor
    from paddleray.services.exporter.serving.spec import PredictorOptions

    model = serving_models.build("mlp")
    onnx = _has_onnxruntime()
    artifact = load_artifact(serving_models.export(model, root / "mlp", onnx=onnx))
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    with paddle.no_grad():
        reference = model(paddle.to_tensor(x)).numpy()
    paddle_predictor = load_predictor(artifact, "paddle", PredictorOptions())
    backends = {"paddle": paddle_predictor}
    if onnx:
        backends["onnx"] = load_predictor(artifact, "onnx", PredictorOptions())
    # Only a backend whose answer matches the dynamic model may be the served one.
    validated = [b for b, pr in backends.items() if np.allclose(pr.predict({"x": x})["fetch_name_0"], reference, 1e-5, 1e-5)]
    served = "onnx" if "onnx" in validated else "paddle"

    def dygraph():
        with paddle.no_grad():
            model(paddle.to_tensor(x)).numpy()

    rounds: dict[str, list[float]] = {"dygraph": [], "paddle": [], "served": []}
    for _ in range(p["rounds"]):
        rounds["dygraph"].append(_median_latency(dygraph, p["calls"]))
        rounds["paddle"].append(_median_latency(lambda: paddle_predictor.predict({"x": x}), p["calls"]))
        rounds["served"].append(_median_latency(lambda: backends[served].predict({"x": x}), p["calls"]))
    return {"served_backend": served, "validated": validated, "artifact": artifact.root, "rounds": rounds}


def _has_onnxruntime() -> bool:
    try:
        import onnxruntime  # noqa: F401
        import paddle2onnx  # noqa: F401
    except ImportError:
        return False
    return True


def _load(target: str, model: str, seconds: float, version: str = "", stop_file: str = "") -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(REPO / "bench" / "serving_load.py"), target, model, str(seconds), str(CONCURRENCY), version, stop_file],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def _result(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate(timeout=600)
    return json.loads(out.strip().splitlines()[-1])


def _trial(target: str, model: str, seconds: float, cpu: ServeCpu | None = None) -> dict:
    before = cpu.sample() if cpu else None
    result = _result(_load(target, model, seconds))
    if cpu and before is not None:
        result["cpu_ms_per_request"] = cpu.per_request(before, cpu.sample(), result["ok"])
    return result


class ServeCpu:
    """CPU seconds of Serve's processes by role, from /proc (proxy, ingress, model replicas)."""

    ROLES = {"proxy": "ProxyActor", "ingress": "ServeReplica:paddleray-inference", "model": "ServeReplica:pr-model-"}

    def sample(self) -> dict[str, float]:
        totals = dict.fromkeys(self.ROLES, 0.0)
        tick = os.sysconf("SC_CLK_TCK")
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            for role, marker in self.ROLES.items():
                if marker in cmdline:
                    totals[role] += (int(fields[11]) + int(fields[12])) / tick
        return totals

    @classmethod
    def model_niceness(cls) -> int:
        """The niceness Ray gave a model replica's process."""
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if cls.ROLES["model"].encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])
            except OSError:
                continue
        raise RuntimeError("no model replica process found")

    def per_request(self, before: dict[str, float], after: dict[str, float], requests: int) -> dict[str, float]:
        return {role: round((after[role] - before[role]) * 1000 / max(requests, 1), 3) for role in self.ROLES}


async def serve_part(root: Path, mlp_artifact: Path, backend: str, p: dict) -> dict:
    from paddleray.inference.v2 import grpc_service_pb2_grpc
    from paddleray.services.exporter.serving import codec
    from paddleray.services.exporter.serving.controller import ServingController
    from paddleray.services.exporter.serving.spec import Batching, PredictorOptions, ServedModel, ServedVersion
    from paddleray.services.localstack.ports import free_port

    wide = serving_models.export(serving_models.build("wide"), root / "wide", onnx=False)
    onednn = PredictorOptions(enable_mkldnn=True)
    direct = None
    out: dict = {}
    try:
        direct = subprocess.Popen(
            [sys.executable, str(REPO / "bench" / "serving_direct.py"), str(mlp_artifact), backend, "0", "mlp"],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert direct.stdout is not None
        direct_target = f"127.0.0.1:{int(direct.stdout.readline())}"
        ctl = ServingController(grpc_port=free_port(), http_port=free_port(), deploy_timeout_s=300)
        await ctl.start()
        ports = {name: free_port() for name in ("mlp", "wide-batched", "wide-unbatched")}
        v1 = ServedVersion("1", str(mlp_artifact), backend=backend, num_cpus=0.5)
        models = [
            ServedModel("mlp", [v1], direct_port=ports["mlp"]),
            ServedModel("mlp-batched", [ServedVersion("1", str(mlp_artifact), backend=backend, num_cpus=0.25,
                                                      batching=Batching(32, 0.002))]),
            ServedModel("wide-batched", [ServedVersion("1", str(wide), predictor=onednn, num_cpus=0.25,
                                                       batching=Batching(32, WIDE_BATCH_WAIT_S))],
                        direct_port=ports["wide-batched"]),
            ServedModel("wide-unbatched", [ServedVersion("1", str(wide), predictor=onednn, num_cpus=0.25)],
                        direct_port=ports["wide-unbatched"]),
        ]
        started = time.perf_counter()
        await ctl.apply(models)
        out["first_apply_s"] = time.perf_counter() - started
        # Ray starts its workers (Serve's proxy and replicas among them) at niceness 15 (its
        # worker_niceness), and the load process runs at 0 beside them on the same cores: a
        # baseline at 0 would measure the OS scheduler's preference, not the serving path
        # (measured: the own endpoint 0.59-0.75 of a baseline at 0, 0.73-0.77 at 15, 4 s rounds).
        out["direct_niceness"] = ServeCpu.model_niceness()
        os.setpriority(os.PRIO_PROCESS, direct.pid, out["direct_niceness"])
        serve_target = f"127.0.0.1:{ctl.grpc_port}"
        endpoint = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
        cpu = ServeCpu()
        for key in ("endpoint", "serve", "direct", "serve_batched"):
            out[key] = []
        for _ in range(p["rounds"]):
            out["endpoint"].append(_trial(endpoint["mlp"], "mlp", p["trial_s"], cpu))
            out["direct"].append(_trial(direct_target, "mlp", p["trial_s"]))
            out["serve"].append(_trial(serve_target, "mlp", p["trial_s"], cpu))
            out["serve_batched"].append(_trial(serve_target, "mlp-batched", p["trial_s"]))
        out["batched"], out["unbatched"] = harness.alternate(
            lambda: _trial(serve_target, "wide-batched", p["trial_s"]),
            lambda: _trial(serve_target, "wide-unbatched", p["trial_s"]),
            p["rounds"],
        )
        # Batching inside the replica, on the model's own endpoint (the batch queue is local there).
        out["endpoint_batched"], out["endpoint_unbatched"] = harness.alternate(
            lambda: _trial(endpoint["wide-batched"], "wide-batched", p["trial_s"]),
            lambda: _trial(endpoint["wide-unbatched"], "wide-unbatched", p["trial_s"]),
            p["rounds"],
        )
        # Rollouts under load on both paths at once: version 2 (a copy of the artifact: a new
        # app) beside 1, then 50/50, then 2 alone (1's app deleted: its endpoint drains).
        copy = root / "mlp-2"
        shutil.copytree(mlp_artifact, copy)
        v2 = ServedVersion("2", str(copy), backend=backend, num_cpus=0.5, weight=0.0)
        stop = root / "stop-load"
        loads = {"proxy": _load(serve_target, "mlp", 600, stop_file=str(stop)),
                 "endpoint": _load(endpoint["mlp"], "mlp", 600, stop_file=str(stop))}
        await asyncio.sleep(1.0)
        rest = models[1:]
        started = time.perf_counter()
        await ctl.apply([ServedModel("mlp", [v1, v2], direct_port=ports["mlp"]), *rest])
        out["rollout_apply_s"] = time.perf_counter() - started
        import grpc

        with grpc.insecure_channel(serve_target) as channel:
            stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
            request = codec.encode_request("mlp", {"x": np.zeros((1, 64), np.float32)}, version="2")
            out["cold_first_request_ms"] = harness.timed(lambda: stub.ModelInfer(request, timeout=60)) * 1000
            out["warm_request_ms"] = statistics.median(
                harness.timed(lambda: stub.ModelInfer(request, timeout=60)) * 1000 for _ in range(20)
            )
        import dataclasses

        half = [dataclasses.replace(v1, weight=0.5), dataclasses.replace(v2, weight=0.5)]
        await ctl.apply([ServedModel("mlp", half, direct_port=ports["mlp"]), *rest])
        await asyncio.sleep(1.0)
        await ctl.apply([ServedModel("mlp", [dataclasses.replace(v2, weight=1.0)], direct_port=ports["mlp"]), *rest])
        await asyncio.sleep(1.0)
        stop.touch()
        out["rollout"] = _result(loads["proxy"])
        out["endpoint_rollout"] = _result(loads["endpoint"])
        await ctl.stop(shutdown_serve=True)
    finally:
        if direct is not None:
            direct.kill()
    return out


def run(quick: bool, smoke: bool = False) -> dict:
    from paddleray.services.localstack.ray_head import AUTH_ENV, RayHead

    # Before Ray is imported: it reads the auth mode once.
    os.environ.update(AUTH_ENV)
    import ray

    p = _params(quick, smoke)
    with tempfile.TemporaryDirectory(prefix="paddleray-serving-bench-") as tmp:
        root = Path(tmp)
        lat = latency_part(root, p)
        # Connected outside the event loop: ray.init inside a running loop timed out on the GCS.
        head = RayHead(num_cpus=2, log_file=root / "ray.log").start()
        try:
            _connect(ray, head.address)
            srv = asyncio.run(serve_part(root, lat["artifact"], lat["served_backend"], p))
        finally:
            ray.shutdown()
            head.stop()
    r = lat["rounds"]
    per_round = {
        "static_vs_dygraph": [d / s for d, s in zip(r["dygraph"], r["served"], strict=True)],
        "paddle_inference_vs_dygraph": [d / s for d, s in zip(r["dygraph"], r["paddle"], strict=True)],
        "batching_gain": [b["rps"] / u["rps"] for b, u in zip(srv["batched"], srv["unbatched"], strict=True)],
        "serve_vs_direct": [s["rps"] / d["rps"] for s, d in zip(srv["endpoint"], srv["direct"], strict=True)],
    }
    ratios = {key: round(harness.median(values), 4) for key, values in per_round.items()}
    rollout, endpoint_rollout = srv["rollout"], srv["endpoint_rollout"]
    metrics = {
        "served_backend": lat["served_backend"],
        "validated_backends": lat["validated"],
        "dygraph_bs1_us": round(harness.median(r["dygraph"]) * 1e6, 1),
        "paddle_inference_bs1_us": round(harness.median(r["paddle"]) * 1e6, 1),
        "served_backend_bs1_us": round(harness.median(r["served"]) * 1e6, 1),
        "endpoint_rps": [round(t["rps"], 1) for t in srv["endpoint"]],
        "endpoint_p50_ms": round(harness.median([t["p50_ms"] for t in srv["endpoint"]]), 2),
        "endpoint_p99_ms": round(harness.median([t["p99_ms"] for t in srv["endpoint"]]), 2),
        "endpoint_cpu_ms_per_request": srv["endpoint"][-1]["cpu_ms_per_request"],
        "proxy_vs_direct": round(
            harness.median([s["rps"] / d["rps"] for s, d in zip(srv["serve"], srv["direct"], strict=True)]), 4),
        "serve_rps": [round(t["rps"], 1) for t in srv["serve"]],
        "direct_rps": [round(t["rps"], 1) for t in srv["direct"]],
        "serve_p50_ms": round(harness.median([t["p50_ms"] for t in srv["serve"]]), 2),
        "serve_p99_ms": round(harness.median([t["p99_ms"] for t in srv["serve"]]), 2),
        "direct_p50_ms": round(harness.median([t["p50_ms"] for t in srv["direct"]]), 2),
        "direct_p99_ms": round(harness.median([t["p99_ms"] for t in srv["direct"]]), 2),
        "serve_cpu_ms_per_request": srv["serve"][-1]["cpu_ms_per_request"],
        "serve_batched_rps": [round(t["rps"], 1) for t in srv["serve_batched"]],
        "serve_batched_vs_direct": round(
            harness.median([s["rps"] / d["rps"] for s, d in zip(srv["serve_batched"], srv["direct"], strict=True)]), 4
        ),
        "batched_rps": [round(t["rps"], 1) for t in srv["batched"]],
        "unbatched_rps": [round(t["rps"], 1) for t in srv["unbatched"]],
        "batched_p99_ms": round(harness.median([t["p99_ms"] for t in srv["batched"]]), 2),
        "unbatched_p99_ms": round(harness.median([t["p99_ms"] for t in srv["unbatched"]]), 2),
        "endpoint_batching_gain": round(harness.median(
            [b["rps"] / u["rps"] for b, u in zip(srv["endpoint_batched"], srv["endpoint_unbatched"], strict=True)]), 4),
        "endpoint_batched_rps": [round(t["rps"], 1) for t in srv["endpoint_batched"]],
        "endpoint_unbatched_rps": [round(t["rps"], 1) for t in srv["endpoint_unbatched"]],
        "cold_first_request_ms": round(srv["cold_first_request_ms"], 2),
        "warm_request_ms": round(srv["warm_request_ms"], 2),
        "first_apply_s": round(srv["first_apply_s"], 2),
        "rollout_apply_s": round(srv["rollout_apply_s"], 2),
        "rollout_failed_requests": rollout["failed"],
        "rollout_requests": rollout["ok"],
        "rollout_max_latency_ms": round(rollout["max_ms"], 1),
        "rollout_versions": rollout["versions"],
        "endpoint_rollout_failed_requests": endpoint_rollout["failed"],
        "endpoint_rollout_requests": endpoint_rollout["ok"],
        "endpoint_rollout_max_latency_ms": round(endpoint_rollout["max_ms"], 1),
        "endpoint_rollout_versions": endpoint_rollout["versions"],
        "endpoint_rollout_codes": endpoint_rollout["codes"],
        "load_1min": os.getloadavg()[0],
        "direct_niceness": srv["direct_niceness"],
    }
    params = {**p, "concurrency": CONCURRENCY, "serving_path": "the model's own endpoint (serve_vs_direct); Serve's gRPC proxy (proxy_vs_direct, batching_gain)",
              "wide_batch_wait_ms": WIDE_BATCH_WAIT_S * 1000}
    sides = {
        "dygraph_calls": p["calls"] * p["rounds"],
        "predictor_calls": p["calls"] * p["rounds"],
        "endpoint_requests": sum(t["ok"] for t in srv["endpoint"]),
        "serve_requests": sum(t["ok"] for t in srv["serve"]),
        "direct_requests": sum(t["ok"] for t in srv["direct"]),
        "batched_requests": sum(t["ok"] for t in srv["batched"]),
        "unbatched_requests": sum(t["ok"] for t in srv["unbatched"]),
    }
    return _document(params, metrics, ratios, per_round, sides)


def _connect(ray, address: str, attempts: int = 6) -> None:
    """ray.init, again while the head's raylet has not registered yet (its GCS port opens first)."""
    for attempt in range(attempts):
        try:
            ray.init(address=address, log_to_driver=False)
            return
        except ConnectionError:
            if attempt == attempts - 1:
                raise
            time.sleep(5)


def _document(params, metrics, ratios, per_round, sides) -> dict:
    return harness.result("serving", params, metrics, ratios, TARGETS, per_round=per_round, sides=sides)
