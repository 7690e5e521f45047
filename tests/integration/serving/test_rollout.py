"""Traffic split and rolling updates under client loops on both v2 paths (Serve's proxy, and the
model's own endpoint on its replicas): zero failed requests."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

import grpc
import numpy as np

from paddleray.inference.v2 import grpc_service_pb2_grpc
from paddleray.services.exporter.serving import codec
from paddleray.services.exporter.serving.spec import ServedModel, ServedVersion
from paddleray.services.localstack.ports import free_port
from support.serving import dynamic_forward

CPU = 0.1
X = np.random.default_rng(5).standard_normal((1, 64)).astype(np.float32)


class ClientLoop:
    """Threads calling ModelInfer without a version until stopped; counts failures and versions."""

    def __init__(self, port: int, references: dict[str, np.ndarray], threads: int = 4) -> None:
        self._channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self._stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        self._references = references
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.failures: list[str] = []
        self.versions: Counter[str] = Counter()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _run(self) -> None:
        request = codec.encode_request("mlp", {"x": X})
        while not self._stop.is_set():
            try:
                response = self._stub.ModelInfer(request, timeout=30)
                out = codec.decode_response(response)["fetch_name_0"]
                ok = np.allclose(out, self._references[response.model_version], rtol=1e-5, atol=1e-5)
                with self._lock:
                    self.versions[response.model_version] += 1
                    if not ok:
                        self.failures.append(f"version {response.model_version} answered with another's outputs")
            except grpc.RpcError as exc:
                with self._lock:
                    self.failures.append(f"{exc.code().name}: {exc.details()}")

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


DIRECT_PORT = free_port()


def _mlp(*versions: ServedVersion) -> list[ServedModel]:
    return [ServedModel("mlp", list(versions), direct_port=DIRECT_PORT)]


def test_split_and_rolling_updates_fail_no_request(controller, artifacts):
    one, two = str(artifacts["mlp1"][0]), str(artifacts["mlp2"][0])
    references = {
        "1": dynamic_forward(artifacts["mlp1"][1], X)[0],
        "2": dynamic_forward(artifacts["mlp2"][1], X)[0],
    }
    asyncio.run(controller.apply(_mlp(ServedVersion("1", one, num_cpus=CPU))))
    # The direct loop's one connection lands on one replica (v1's or v2's), which answers its own
    # version and forwards the other by weight: the split must hold there too.
    with ClientLoop(controller.grpc_port, references) as loop, ClientLoop(DIRECT_PORT, references) as direct:
        # A new version beside the old one, 90/10.
        asyncio.run(controller.apply(_mlp(
            ServedVersion("1", one, weight=0.9, num_cpus=CPU), ServedVersion("2", two, weight=0.1, num_cpus=CPU)
        )))
        before, direct_before = loop.snapshot(), direct.snapshot()
        while sum((loop.snapshot() - before).values()) < 800 or sum((direct.snapshot() - direct_before).values()) < 800:
            threading.Event().wait(0.2)
        split, direct_split = loop.snapshot() - before, direct.snapshot() - direct_before
        # Version 1 replaced in place by a new export of the same weights (a new app, blue/green),
        # then all traffic moved to version 2, then version 1 removed.
        replaced = artifacts["mlp1"][0].parent / "1-again"
        if not replaced.exists():
            import shutil

            shutil.copytree(artifacts["mlp1"][0], replaced)
        asyncio.run(controller.apply(_mlp(
            ServedVersion("1", str(replaced), weight=0.9, num_cpus=CPU), ServedVersion("2", two, weight=0.1, num_cpus=CPU)
        )))
        asyncio.run(controller.apply(_mlp(
            ServedVersion("1", str(replaced), weight=0.0, num_cpus=CPU), ServedVersion("2", two, weight=1.0, num_cpus=CPU)
        )))
        mark, direct_mark = loop.snapshot(), direct.snapshot()
        asyncio.run(controller.apply(_mlp(ServedVersion("2", two, weight=1.0, num_cpus=CPU))))
        after, direct_after = loop.snapshot(), direct.snapshot()
        while sum((loop.snapshot() - after).values()) < 50 or sum((direct.snapshot() - direct_after).values()) < 50:
            threading.Event().wait(0.1)
        tail, direct_tail = loop.snapshot() - after, direct.snapshot() - direct_after
    assert loop.failures == [] and direct.failures == []
    for name, counts in (("proxy", split), ("direct", direct_split)):
        # Binomial with p = 0.1 over >= 800 draws: sd <= 0.011, the band is > 4 sd each side.
        assert 0.05 < counts["2"] / sum(counts.values()) < 0.15, (name, counts)
    assert set(tail) == {"2"} and (after - mark)["1"] == 0
    assert set(direct_tail) == {"2"} and (direct_after - direct_mark)["1"] == 0
    status = asyncio.run(controller.status())
    assert set(status["mlp"].versions) == {"2"} and status["mlp"].versions["2"].serving
