"""The environment of a process given a GPU (or a fraction of one) by Ray, set before Paddle is
imported in it: training workers (services/trainer/worker.py) and Serve replicas
(services/exporter/serving/replica/gpu.py) follow the same rule, so a fraction means the same memory cap
in both. Pure functions, so the GPU path is checked without a GPU.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from collections.abc import Callable, Sequence
from typing import Any


def gpu_process_env(num_gpus: float, ray_gpu_ids: Sequence[Any], total_memory_mb: int | None) -> dict[str, str]:
    """Env a GPU worker needs before Paddle is imported in it.

    Each worker sees only Ray's assignment (as device 0). A fraction of a GPU is enforced
    with Paddle's own allocator flags, since Ray only counts fractions and does not cap memory:
    FLAGS_gpu_memory_limit_mb is a hard limit per process; FLAGS_fraction_of_gpu_memory_to_use
    sizes the first chunk, so a process never grabs more than its share up front.
    """
    if num_gpus <= 0:
        return {}
    env = {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in ray_gpu_ids), "FLAGS_selected_gpus": "0"}
    if num_gpus < 1:
        env["FLAGS_fraction_of_gpu_memory_to_use"] = f"{num_gpus:.4f}"
        if total_memory_mb:
            env["FLAGS_gpu_memory_limit_mb"] = str(gpu_memory_limit_mb(num_gpus, total_memory_mb))
    return env


def gpu_memory_limit_mb(num_gpus: float, total_memory_mb: int) -> int:
    return int(math.floor(total_memory_mb * num_gpus))


def probe_gpu_memory_mb(device: str = "0", run: Callable[..., Any] = subprocess.run) -> int | None:
    """Total memory of a (physical) GPU in MiB from nvidia-smi, or None when it is not there."""
    if run is subprocess.run and shutil.which("nvidia-smi") is None:
        return None
    try:
        out = run(
            ["nvidia-smi", f"--id={device}", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
        return int(out.strip().splitlines()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
