"""Per-node fit: whether a job's workers can be placed on the nodes' free resources now.

The claim (lua/claim_job.lua) checks a job against the whole cluster's free resources, but
Ray places each worker (one placement-group bundle) on one node: a rank needing 2 CPUs does
not fit two nodes with 1 CPU free each, STRICT_SPREAD needs as many nodes as workers, and a
worker asking for a node's label resource (`paddleray-node:<name>`) fits only that node. The
dispatcher checks this first, against the trainer's per-node view minus what it already sent
that Ray has not placed yet (NodeView.take), and a job that does not fit says why ("no node
has 2 CPUs free; largest free: 1"). Bundles of one job are identical, so whether they fit is
counting, not search: how many bundles each node holds.

Amounts here are dicts of exact integers: "cpu_m", "gpu_m" (milli-units), "mem" (bytes) and
"custom:<name>" (milli-units of a custom Ray resource).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from paddleray.common.v1 import common_pb2
from paddleray.services.common.resources import FIELDS, from_cluster, job_demand, milli, quantity, unit_text
from paddleray.trainer.v1 import run_pb2, trainer_service_pb2

S = common_pb2.PlacementStrategy
Slot = Mapping[str, int]
_CUSTOM = "custom:"


def slot(amounts: run_pb2.ResourceAmounts) -> dict[str, int]:
    """A node's (or the cluster's) resources as exact integers."""
    base = from_cluster(amounts)
    out = {field: getattr(base, field) for field in FIELDS}
    out.update({_CUSTOM + name: milli(value) for name, value in amounts.custom.items()})
    return out


@dataclass(frozen=True)
class Demand:
    """A job's workers as Ray places them: `count` equal bundles under a strategy."""

    bundle: Slot
    count: int
    strategy: int

    @classmethod
    def of(cls, spec: common_pb2.TrainingSpec, count_memory: bool = True) -> Demand:
        """count_memory False: for a cluster that reports no memory (it does not account for it)."""
        workers = spec.num_workers or 1
        total = job_demand(spec)
        bundle = {"cpu_m": total.cpu_m // workers, "gpu_m": total.gpu_m // workers,
                  "mem": total.mem // workers if count_memory else 0}
        bundle.update({_CUSTOM + name: milli(value) for name, value in spec.resources_per_worker.custom.items()})
        return cls({k: v for k, v in bundle.items() if v > 0}, workers, spec.placement_strategy)


def never_fits(spec: common_pb2.TrainingSpec, cluster: trainer_service_pb2.GetClusterResourcesResponse) -> str:
    """Why the job cannot run on this cluster even when it is empty ("" when it can): more of a
    resource than the cluster has in total, a worker larger than every node, or workers its
    strategy cannot place on the nodes there are (STRICT_SPREAD over more nodes than there are,
    STRICT_PACK larger than the largest node), a custom resource (a node label, 'tpu') that no
    node has ("needs resource 'tpu': no node has it"). A cluster that reports no CPUs at all
    (not known yet) is not judged."""
    total = from_cluster(cluster.total)
    if total.cpu_m <= 0:
        return ""
    demand = job_demand(spec)
    for field in FIELDS:
        needed, has = getattr(demand, field), getattr(total, field)
        if field == "mem" and has <= 0:
            continue  # a cluster that reports no memory does not account for it
        if needed > has:
            return f"needs {unit_text(field, needed)}; the cluster has {quantity(field, has)}"
    workers_n = spec.num_workers or 1
    for name, amount in sorted(spec.resources_per_worker.custom.items()):
        needed, has = milli(amount) * workers_n, milli(cluster.total.custom.get(name, 0.0))
        if needed <= 0:
            continue
        if has <= 0:  # Ray would leave its placement group pending for ever, the job STARTING
            return f"needs resource {name!r}: no node has it"
        if needed > has:
            return f"needs {needed / 1000:g} of resource {name!r}; the cluster has {has / 1000:g}"
    nodes = [slot(node.total) for node in cluster.nodes]
    if not nodes:
        return ""
    workers = Demand.of(spec, count_memory=total.mem > 0 and max(node["mem"] for node in nodes) > 0)
    for name, needed in workers.bundle.items():
        largest = max(node.get(name, 0) for node in nodes)
        if needed > largest:
            return f"each worker needs {_text(name, needed)}; the largest node has {_quantity(name, largest)}"
    if place(workers, nodes) is None:
        return f"{explain(workers, nodes, free='')}, even on the empty cluster"
    return ""


def _holds(node: Slot, bundle: Slot) -> int:
    """How many bundles fit in `node` (a bundle asking for nothing fits any number of times)."""
    counts = [node.get(name, 0) // amount for name, amount in bundle.items()]
    return max(0, min(counts)) if counts else 1 << 30


def place(demand: Demand, nodes: Sequence[Slot]) -> list[int] | None:
    """The node index of each bundle, as Ray would place them, or None when they do not fit."""
    holds = [_holds(node, demand.bundle) for node in nodes]
    by_room = sorted(range(len(nodes)), key=lambda i: -holds[i])
    if demand.strategy == S.PLACEMENT_STRATEGY_STRICT_PACK:
        fitting = [i for i in by_room if holds[i] >= demand.count]
        # The tightest node that holds them all leaves the larger ones for larger jobs.
        return [fitting[-1]] * demand.count if fitting else None
    if demand.strategy == S.PLACEMENT_STRATEGY_STRICT_SPREAD:
        fitting = [i for i in by_room if holds[i] >= 1]
        return fitting[: demand.count] if len(fitting) >= demand.count else None
    if sum(min(h, demand.count) for h in holds) < demand.count:
        return None
    placed: list[int] = []
    if demand.strategy == S.PLACEMENT_STRATEGY_SPREAD:
        left = list(holds)
        while len(placed) < demand.count:  # one bundle per node in turn
            for i in by_room:
                if left[i] > 0 and len(placed) < demand.count:
                    placed.append(i)
                    left[i] -= 1
        return placed
    for i in by_room:  # PACK: as few nodes as possible
        placed += [i] * min(holds[i], demand.count - len(placed))
    return placed


def explain(demand: Demand, nodes: Sequence[Slot], free: str = " free") -> str:
    """Why the demand does not fit these nodes (place() returned None): their free resources
    now, or with free="" their totals."""
    one = dict(demand.bundle)
    if demand.strategy == S.PLACEMENT_STRATEGY_STRICT_PACK and demand.count > 1:
        one = {name: amount * demand.count for name, amount in one.items()}
    if demand.count == 1 or demand.strategy == S.PLACEMENT_STRATEGY_STRICT_PACK:
        for name, needed in one.items():
            largest = max((node.get(name, 0) for node in nodes), default=0)
            if needed > largest:
                return f"no node has {_text(name, needed)}{free}; largest{free}: {_quantity(name, largest)}"
        return f"no node has {_amounts(one)}{free} at once"
    if demand.strategy == S.PLACEMENT_STRATEGY_STRICT_SPREAD:
        count = sum(1 for node in nodes if _holds(node, one) >= 1)
        return (f"{demand.count} workers on different nodes need {demand.count} nodes with {_amounts(one)}{free}; "
                f"{count} {'has' if count == 1 else 'have'}")
    room = sum(min(_holds(node, one), demand.count) for node in nodes)
    return f"the nodes have room for {room} of its {demand.count} workers of {_amounts(one)} each"


def _text(name: str, amount: int) -> str:
    if name.startswith(_CUSTOM):
        return f"{amount / 1000:g} of {name.removeprefix(_CUSTOM)}"
    return unit_text(name, amount)


def _quantity(name: str, amount: int) -> str:
    return f"{amount / 1000:g}" if name.startswith(_CUSTOM) else quantity(name, amount)


def _amounts(amounts: Slot) -> str:
    return " and ".join(_text(name, amount) for name, amount in amounts.items() if amount > 0) or "nothing"


def node_view(cluster: trainer_service_pb2.GetClusterResourcesResponse) -> NodeView:
    """The nodes' free resources as the trainer reports them (none: a trainer without nodes)."""
    return NodeView([slot(node.available) for node in cluster.nodes])


class NodeView:
    """The nodes' free resources during one dispatch pass; take() books a job onto them."""

    def __init__(self, free: Sequence[Slot]) -> None:
        self.free = [dict(node) for node in free]

    def fits(self, demand: Demand) -> bool:
        return not self.free or place(demand, self.free) is not None

    def why_not(self, demand: Demand) -> str:
        return explain(demand, self.free)

    def take(self, demand: Demand) -> bool:
        """Books the demand where place() puts it; False (nothing booked) when it does not fit.
        A view of no nodes (a trainer that does not report them) books everything."""
        if not self.free:
            return True
        placed = place(demand, self.free)
        if placed is None:
            return False
        for i in placed:
            for name, amount in demand.bundle.items():
                self.free[i][name] = self.free[i].get(name, 0) - amount
        return True
