"""Resource amounts in exact integer units: milli-CPUs, milli-GPUs and bytes.

Floats do not add up exactly (0.1 + 0.2 != 0.3), and admission must: a card shared as
0.5 + 0.25 + 0.25 is full, not over- or under-full. Every amount is rounded to a milli-unit
once, at the edge, and only integers are added and compared after that (also in Lua).
"""

from __future__ import annotations

from dataclasses import dataclass

from paddleray.common.v1 import common_pb2
from paddleray.trainer.v1 import run_pb2, trainer_service_pb2


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
    return Amounts(milli(per.num_cpus) * workers, milli(per.num_gpus) * workers, per.memory_bytes * workers)


def from_cluster(amounts: run_pb2.ResourceAmounts) -> Amounts:
    return Amounts(milli(amounts.num_cpus), milli(amounts.num_gpus), amounts.memory_bytes)


def never_fits(spec: common_pb2.TrainingSpec, cluster: trainer_service_pb2.GetClusterResourcesResponse) -> str:
    """Why the job cannot run on this cluster even when it is empty ("" when it can): more of a
    resource than the cluster has in total, or a worker larger than every node. A cluster that
    reports no CPUs at all (not known yet) is not judged."""
    total = from_cluster(cluster.total)
    if total.cpu_m <= 0:
        return ""
    workers = spec.num_workers or 1
    demand = job_demand(spec)
    per = Amounts(demand.cpu_m // workers, demand.gpu_m // workers, demand.mem // workers)
    for field in _FIELDS:
        needed, has = getattr(demand, field), getattr(total, field)
        if field == "mem" and has <= 0:
            continue  # a cluster that reports no memory does not account for it
        if needed > has:
            return f"needs {_text(field, needed)}; the cluster has {_number(field, has)}"
    nodes = [from_cluster(node.total) for node in cluster.nodes]
    for field in _FIELDS if nodes else ():
        largest, needed = max(getattr(node, field) for node in nodes), getattr(per, field)
        if field == "mem" and largest <= 0:
            continue
        if needed > largest:
            return f"each worker needs {_text(field, needed)}; the largest node has {_number(field, largest)}"
    return ""


_FIELDS = ("cpu_m", "gpu_m", "mem")


def _text(field: str, amount: int) -> str:
    """What a job needs: "64 CPUs", "1 GPU", "16 GiB of memory"."""
    if field == "mem":
        return f"{_number(field, amount)} of memory"
    unit = "CPU" if field == "cpu_m" else "GPU"
    return f"{_number(field, amount)} {unit}{'' if amount == 1000 else 's'}"


def _number(field: str, amount: int) -> str:
    """What a cluster or node has: "2", "8 GiB"."""
    return f"{amount / 2**30:.3g} GiB" if field == "mem" else f"{amount / 1000:g}"
