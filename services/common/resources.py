"""Resource amounts in exact integer units: milli-CPUs, milli-GPUs and bytes.

Floats do not add up exactly (0.1 + 0.2 != 0.3), and admission must: a card shared as
0.5 + 0.25 + 0.25 is full, not over- or under-full. Every amount is rounded to a milli-unit
once, at the edge, and only integers are added and compared after that (also in Lua).
"""

from __future__ import annotations

from dataclasses import dataclass

from paddleray.common.v1 import common_pb2
from paddleray.services.common import training_spec
from paddleray.trainer.v1 import run_pb2


def milli(value: float) -> int:
    return round(value * 1000)


@dataclass(frozen=True)
class Amounts:
    cpu_m: int = 0
    gpu_m: int = 0
    mem: int = 0

    def __add__(self, other: Amounts) -> Amounts:
        return Amounts(self.cpu_m + other.cpu_m, self.gpu_m + other.gpu_m, self.mem + other.mem)

    @staticmethod
    def minimum(a: Amounts, b: Amounts) -> Amounts:
        return Amounts(min(a.cpu_m, b.cpu_m), min(a.gpu_m, b.gpu_m), min(a.mem, b.mem))


def job_demand(spec: common_pb2.TrainingSpec) -> Amounts:
    """What a job holds while it runs: its per-worker resources times its workers."""
    workers = spec.num_workers or 1
    per = spec.resources_per_worker
    # What the trainer reserves: unset num_cpus is one CPU per worker, not none.
    return Amounts(milli(training_spec.cpus(per)) * workers, milli(per.num_gpus) * workers, per.memory_bytes * workers)


def from_cluster(amounts: run_pb2.ResourceAmounts) -> Amounts:
    return Amounts(milli(amounts.num_cpus), milli(amounts.num_gpus), amounts.memory_bytes)


FIELDS = ("cpu_m", "gpu_m", "mem")


def unit_text(field: str, amount: int) -> str:
    """What a job needs: "64 CPUs", "1 GPU", "16 GiB of memory"."""
    if field == "mem":
        return f"{quantity(field, amount)} of memory"
    unit = "CPU" if field == "cpu_m" else "GPU"
    return f"{quantity(field, amount)} {unit}{'' if amount == 1000 else 's'}"


def quantity(field: str, amount: int) -> str:
    """What a cluster or node has: "2", "8 GiB"."""
    return f"{amount / 2**30:.3g} GiB" if field == "mem" else f"{amount / 1000:g}"
