"""Runs in: a Serve replica.

GPU environment of a serving replica, set before Paddle is imported in it.

The same rule as training workers (services/common/gpu_env.py): the replica sees only Ray's
GPU as device 0, and a fraction of a GPU is enforced with Paddle's allocator flags, since Ray
only counts fractions and does not cap memory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from paddleray.services.common.gpu_env import gpu_process_env, probe_gpu_memory_mb


def replica_gpu_env(
    num_gpus: float, ray_gpu_ids: Sequence[Any], probe: Callable[[str], int | None] = probe_gpu_memory_mb
) -> dict[str, str]:
    total = probe(str(ray_gpu_ids[0])) if 0 < num_gpus < 1 and ray_gpu_ids else None
    return gpu_process_env(num_gpus, ray_gpu_ids, total)
