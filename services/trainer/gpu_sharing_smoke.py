"""GPU sharing smoke test: two half-GPU trials on one card, each with the memory cap the trainer sets.

Run on a cluster by deploy/kuberay/rayjob-gpu-sharing.yaml (`python -m
paddleray.services.trainer.gpu_sharing_smoke`). Each trial is the trainer's own WorkerActor
at num_gpus=0.5, so its process is set up exactly as a run's rank is (CUDA_VISIBLE_DEVICES
from Ray, FLAGS_fraction_of_gpu_memory_to_use and FLAGS_gpu_memory_limit_mb before Paddle
is imported). It prints one JSON line per trial and exits 1 unless both trials were alive at
once on the same physical GPU, each capped at half of it, each could allocate within its cap,
and an allocation past the cap failed in that trial only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from paddleray.services.common.gpu_env import gpu_memory_limit_mb
from paddleray.services.trainer.worker import WorkerActor

SHARE = 0.5
_MIB = 1024 * 1024


class SharingProbe(WorkerActor):
    def caps(self, allocate_mb: int, overreach_mb: int) -> dict[str, Any]:
        import os

        import ray

        paddle = self._import_paddle()  # imported at start: a GPU worker
        [gpu] = [str(i) for i in ray.get_gpu_ids()]
        uuid = subprocess.run(
            ["nvidia-smi", f"--id={gpu}", "--query-gpu=uuid,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout.strip()
        flags = paddle.get_flags(["FLAGS_gpu_memory_limit_mb", "FLAGS_fraction_of_gpu_memory_to_use"])
        kept = paddle.zeros([allocate_mb * _MIB // 4], dtype="float32")
        try:
            paddle.zeros([overreach_mb * _MIB // 4], dtype="float32")
            overreach = "allocated"
        except Exception as exc:  # noqa: BLE001 - the out-of-memory error is the expected outcome
            overreach = type(exc).__name__
        return {
            "pid": os.getpid(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
            "gpu_uuid": uuid.split(",")[0].strip(),
            "total_mb": int(uuid.split(",")[1]),
            "gpu_memory_limit_mb": int(flags["FLAGS_gpu_memory_limit_mb"]),
            "fraction_of_gpu_memory_to_use": float(flags["FLAGS_fraction_of_gpu_memory_to_use"]),
            "allocated_mb": int(kept.numel()) * 4 // _MIB,
            "overreach": overreach,
        }


def problems(reports: list[dict[str, Any]]) -> list[str]:
    """What the two trials' reports show is wrong with the sharing ([] when it is right)."""
    found = []
    if len(reports) != 2:
        return [f"expected 2 trials, got {len(reports)}"]
    first, second = reports
    if first["gpu_uuid"] != second["gpu_uuid"]:
        found.append(f"the trials ran on different GPUs: {first['gpu_uuid']} and {second['gpu_uuid']}")
    if first["pid"] == second["pid"]:
        found.append("both trials ran in one process")
    for report in reports:
        expected = gpu_memory_limit_mb(SHARE, report["total_mb"])
        if report["gpu_memory_limit_mb"] != expected:
            found.append(f"pid {report['pid']}: memory cap {report['gpu_memory_limit_mb']} MiB, expected {expected}")
        if abs(report["fraction_of_gpu_memory_to_use"] - SHARE) > 1e-6:
            found.append(f"pid {report['pid']}: first chunk {report['fraction_of_gpu_memory_to_use']}, expected {SHARE}")
        if report["overreach"] == "allocated":
            found.append(f"pid {report['pid']}: an allocation past its cap succeeded")
    return found


def main() -> int:
    import ray

    ray.init()
    probe: Any = ray.remote(SharingProbe)
    # Both actors live (each with its CUDA context on the card) until the process ends.
    trials: list[Any] = [probe.options(num_gpus=SHARE, num_cpus=1).remote(SHARE) for _ in range(2)]
    first: dict[str, Any] = ray.get(trials[0].caps.remote(0, 0))
    total = first["total_mb"]
    # Each takes a quarter of the card, then reaches for 60 % (past its half).
    allocate, overreach = total // 4, int(total * 0.6)
    reports: list[dict[str, Any]] = ray.get([t.caps.remote(allocate, overreach) for t in trials])
    for report in reports:
        print(json.dumps(report), flush=True)
    found = problems(reports)
    for problem in found:
        print(f"FAIL: {problem}", flush=True)
    if not found:
        print(f"OK: 2 trials on {reports[0]['gpu_uuid']}, each capped at {reports[0]['gpu_memory_limit_mb']} MiB")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
