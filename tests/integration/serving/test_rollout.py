"""Traffic split and rolling updates under client loops on gRPC and REST at once: zero failed
requests, and the split holds on both (every replica holds each version and draws by weight)."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import urllib.error
import urllib.request
from collections import Counter

import grpc
import numpy as np

from paddleray.services.exporter.serving.replica import codec
from paddleray.services.exporter.serving.spec import ServedModel, ServedVersion
from support.serving import application_channel, dynamic_forward, v2_stub

CPU = 0.1
X = np.random.default_rng(5).standard_normal((1, 64)).astype(np.float32)


class ClientLoop:
    """Threads calling ModelInfer without a version until stopped; counts failures and versions.
    rest: over v2 REST (POST .../infer, JSON) instead of gRPC."""

    def __init__(self, controller, references: dict[str, np.ndarray], threads: int = 3, rest: bool = False) -> None:
        self._rest = rest
        self._url = f"http://127.0.0.1:{controller.http_port}/v2/models/mlp/infer"
        self._channel = application_channel(f"127.0.0.1:{controller.grpc_port}", "mlp")
        self._stub = v2_stub(self._channel)
        self._references = references
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.failures: list[str] = []
        self.versions: Counter[str] = Counter()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _call(self) -> tuple[str, np.ndarray]:
        if not self._rest:
            response = self._stub.ModelInfer(codec.encode_request("mlp", {"x": X}), timeout=30)
            return response.model_version, codec.decode_response(response)["fetch_name_0"]
        body = json.dumps({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32", "data": X.ravel().tolist()}]})
        request = urllib.request.Request(self._url, body.encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            document = json.loads(answer.read())
        return document["model_version"], np.asarray(document["outputs"][0]["data"], np.float32).reshape(1, 10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                version, out = self._call()
                ok = np.allclose(out, self._references[version], rtol=1e-5, atol=1e-5)
                with self._lock:
                    self.versions[version] += 1
                    if not ok:
                        self.failures.append(f"version {version} answered with another's outputs")
            except grpc.RpcError as exc:
                with self._lock:
                    self.failures.append(f"{exc.code().name}: {exc.details()}")
            except (urllib.error.URLError, OSError) as exc:
                with self._lock:
                    self.failures.append(f"REST: {exc}")

    def __enter__(self) -> ClientLoop:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()
        self._channel.close()

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.versions)


def _mlp(*versions: ServedVersion) -> list[ServedModel]:
    return [ServedModel("mlp", list(versions), num_cpus=CPU)]


def _wait_for(loops, baselines, count: int) -> None:
    while any(sum((loop.snapshot() - base).values()) < count for loop, base in zip(loops, baselines, strict=True)):
        threading.Event().wait(0.1)


def test_split_and_rolling_updates_fail_no_request(controller, artifacts):
    one, two = str(artifacts["mlp1"][0]), str(artifacts["mlp2"][0])
    references = {
        "1": dynamic_forward(artifacts["mlp1"][1], X)[0],
        "2": dynamic_forward(artifacts["mlp2"][1], X)[0],
    }
    asyncio.run(controller.apply(_mlp(ServedVersion("1", one))))
    with ClientLoop(controller, references) as grpc_loop, ClientLoop(controller, references, rest=True) as rest_loop:
        loops = (grpc_loop, rest_loop)
        # A new version beside the old one, 90/10.
        asyncio.run(controller.apply(_mlp(ServedVersion("1", one, weight=0.9), ServedVersion("2", two, weight=0.1))))
        before = [loop.snapshot() for loop in loops]
        _wait_for(loops, before, 800)
        splits = [loop.snapshot() - base for loop, base in zip(loops, before, strict=True)]
        # Version 1 replaced by a new export of the same weights (a new predictor, loaded in
        # place), then all traffic moved to version 2, then version 1 removed.
        replaced = artifacts["mlp1"][0].parent / "1-again"
        if not replaced.exists():
            shutil.copytree(artifacts["mlp1"][0], replaced)
        asyncio.run(controller.apply(_mlp(ServedVersion("1", str(replaced), weight=0.9),
                                          ServedVersion("2", two, weight=0.1))))
        asyncio.run(controller.apply(_mlp(ServedVersion("1", str(replaced), weight=0.0),
                                          ServedVersion("2", two, weight=1.0))))
        marks = [loop.snapshot() for loop in loops]
        asyncio.run(controller.apply(_mlp(ServedVersion("2", two, weight=1.0))))
        after = [loop.snapshot() for loop in loops]
        _wait_for(loops, after, 50)
        tails = [loop.snapshot() - base for loop, base in zip(loops, after, strict=True)]
    assert grpc_loop.failures == [] and rest_loop.failures == []
    for name, counts in zip(("grpc", "rest"), splits, strict=True):
        # Binomial with p = 0.1 over >= 800 draws: sd <= 0.011, the band is > 4 sd each side.
        assert 0.05 < counts["2"] / sum(counts.values()) < 0.15, (name, counts)
    for tail, mark, end in zip(tails, marks, after, strict=True):
        assert set(tail) == {"2"} and (end - mark)["1"] == 0
    status = asyncio.run(controller.status())
    assert set(status["mlp"].versions) == {"2"} and status["mlp"].versions["2"].serving
