"""PaddleBackend: Paddle's collective environment across the worker actors of one run.

In the spirit of Ray Train's backends: a small config dataclass plus an on_start hook that
the worker group calls. There is no on_shutdown: Paddle cannot leave a collective group and
join one again, so nothing is undone in the processes (see PaddleBackend). The arithmetic (endpoints, per-rank env) is in pure
functions; the GPU device and memory caps are common.gpu_env's, shared with Serve replicas.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from paddleray.services.common import errors

# Paddle's process group times out collectives after PADDLE_PG_TIMEOUT ms (30 min by
# default); dead ranks are detected by the trainer long before, so this is only a backstop.
_PG_TIMEOUT_MS = 30 * 60 * 1000


@dataclass(frozen=True)
class PaddleBackendConfig:
    """gloo on CPU, NCCL when the workers have GPUs."""

    use_gpu: bool = False
    # Time every rank gets to join the collective group (the first gloo rendezvous takes ~4 s).
    init_timeout_s: float = 120.0

    @property
    def backend(self) -> str:
        return "nccl" if self.use_gpu else "gloo"

    @property
    def device(self) -> str:
        """Paddle's device in each worker: Ray shows a worker only its own GPUs, the first as 0."""
        return "gpu:0" if self.use_gpu else "cpu"


def validate_gpu_request(num_gpus: float, num_workers: int) -> None:
    """Fractions of a GPU only for single-worker runs: ranks sharing a card break NCCL."""
    field = "spec.resources_per_worker.num_gpus"
    if not math.isfinite(num_gpus) or num_gpus < 0:
        raise errors.InvalidArgument(field, "must be a finite number >= 0")
    if num_gpus == 0 or num_gpus == int(num_gpus):
        return
    if num_gpus > 1:
        raise errors.InvalidArgument(field, "must be a whole number when above 1")
    if num_workers > 1:
        raise errors.InvalidArgument(
            field, "a fraction of a GPU is allowed only with num_workers = 1 (ranks sharing a GPU break NCCL)"
        )


def collective_env(rank: int, endpoints: Sequence[str], config: PaddleBackendConfig) -> dict[str, str]:
    """The env Paddle's init_parallel_env reads on one rank; endpoints are host:port, by rank."""
    env = {
        "PADDLE_TRAINER_ID": str(rank),
        "PADDLE_TRAINERS_NUM": str(len(endpoints)),
        "PADDLE_TRAINER_ENDPOINTS": ",".join(endpoints),
        "PADDLE_CURRENT_ENDPOINT": endpoints[rank],
        "PADDLE_MASTER": endpoints[0],
        "PADDLE_DISTRI_BACKEND": config.backend,
        "PADDLE_PG_TIMEOUT": str(_PG_TIMEOUT_MS),
    }
    if config.use_gpu:
        # Ray narrows CUDA_VISIBLE_DEVICES to the worker's GPUs, so its first GPU is device 0.
        env["FLAGS_selected_gpus"] = "0"
    return env


class PaddleBackend:
    """on_start joins every rank to one collective group, for the group's lifetime.

    Paddle cannot re-join a group after destroying it, so a group that is kept warm stays
    initialized; one that is not is ended by killing its processes (WorkerGroup.kill).
    """

    def __init__(self, config: PaddleBackendConfig) -> None:
        self.config = config

    async def on_start(self, workers: Sequence[Any]) -> None:
        """workers: the actor handles by rank (each a worker.WorkerActor)."""
        if len(workers) < 2:
            # A new worker is on CPU already (worker.WorkerActor): only a GPU needs a call.
            if self.config.use_gpu:
                await asyncio.gather(*(w.set_device.remote(self.config.device) for w in workers))
            return
        # A free port found on each worker's own node, not on the driver's.
        endpoints = await asyncio.gather(*(w.reserve_endpoint.remote() for w in workers))
        joins = [
            w.join_collective.remote(collective_env(rank, endpoints, self.config), self.config.device)
            for rank, w in enumerate(workers)
        ]
        await asyncio.wait_for(asyncio.gather(*joins), timeout=self.config.init_timeout_s)


# Paddle's CPU kernels run on Intel OpenMP, MKL (mklml) and oneDNN, and NumPy may bring
# OpenBLAS. Ray sets only OMP_NUM_THREADS (to the actor's whole CPUs); the others follow it
# so a 1-CPU worker computes on 1 thread. Values the user set in the runtime env stay.
MATH_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def math_thread_env(environ) -> dict[str, str]:
    threads = environ.get("OMP_NUM_THREADS")
    if not threads:
        return {}
    return {var: environ.get(var) or threads for var in MATH_THREAD_VARS}
