"""Load generator, run as its own process: N concurrent ModelInfer loops on one grpc.aio channel.

python bench/serving_load.py TARGET MODEL SECONDS CONCURRENCY [VERSION [STOP_FILE [APPLICATION]]] -> one JSON
line (it also stops early once STOP_FILE exists, for loads running through a rollout; every call
carries `application: APPLICATION` metadata when given, as Serve's HAProxy routes by it):
{"ok": n, "failed": n, "codes": {...}, "p50_ms", "p99_ms", "max_ms", "rps", "versions": {...}}
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path

import grpc
import numpy as np

from paddleray.inference.v2 import grpc_service_pb2_grpc
from paddleray.services.exporter.serving.replica.codec import encode_request


async def main(target: str, model: str, seconds: float, concurrency: int, version: str, stop_file: str,
               application: str = "") -> dict:
    request = encode_request(model, {"x": np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)}, version)
    latencies: list[float] = []
    codes: Counter[str] = Counter()
    versions: Counter[str] = Counter()
    async with grpc.aio.insecure_channel(target) as channel:
        stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
        metadata = (("application", application),) if application else None
        await stub.ModelInfer(request, timeout=60, metadata=metadata)  # connected and warm before the clock starts
        deadline = time.perf_counter() + seconds

        stop = Path(stop_file) if stop_file else None

        async def loop() -> None:
            while time.perf_counter() < deadline and not (stop and stop.exists()):
                started = time.perf_counter()
                try:
                    response = await stub.ModelInfer(request, timeout=60, metadata=metadata)
                    versions[response.model_version] += 1
                    codes["OK"] += 1
                except grpc.aio.AioRpcError as exc:
                    codes[exc.code().name] += 1
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    lat = np.asarray(latencies) * 1000
    ok = codes.get("OK", 0)
    return {
        "ok": ok, "failed": sum(codes.values()) - ok, "codes": dict(codes), "versions": dict(versions),
        "rps": ok / elapsed, "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
        "max_ms": float(lat.max()),
    }


if __name__ == "__main__":
    target, model, seconds, concurrency = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    version = sys.argv[5] if len(sys.argv) > 5 else ""
    stop_file = sys.argv[6] if len(sys.argv) > 6 else ""
    application = sys.argv[7] if len(sys.argv) > 7 else ""
    print(json.dumps(asyncio.run(main(target, model, seconds, concurrency, version, stop_file, application))), flush=True)
