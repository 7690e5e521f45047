"""Why a run's placement group is not placed yet, in words a user can act on.

Ray leaves an unsatisfiable placement group pending without saying why, so a run that asks
for more than the cluster has would stay PENDING with no hint. The executor puts this
explanation in the run's state_reason while it waits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import ray

# Ray keeps fractional amounts in units of 1e-4.
_EPSILON = 1e-4


@dataclass(frozen=True)
class PlacementHint:
    text: str
    # The cluster as it is can never place the group (only new or larger nodes would): what a
    # run that ends while waiting reports as FAILURE_KIND_PLACEMENT_IMPOSSIBLE.
    impossible: bool = False


def explain_placement(
    bundle: Mapping[str, float],
    num_workers: int,
    strategy: str,
    total: Mapping[str, float],
    available: Mapping[str, float],
    nodes: Sequence[Mapping[str, float]],
) -> PlacementHint:
    """The first reason, from the hardest to fix, that `num_workers` x `bundle` is not placed.

    total/available: the cluster's resources (available including what idle warm groups
    hold, since they are evicted for a waiting run); nodes: each alive node's total.
    """
    needed = {name: amount * num_workers for name, amount in bundle.items() if amount > 0}
    if short := _short(needed, total):
        return PlacementHint(f"waiting for resources the cluster does not have: the run needs {short} in total", True)
    if not any(_fits(bundle, node) for node in nodes):
        return PlacementHint(
            f"waiting for a node that can hold one worker ({_amounts(bundle)}): no node has that much", True
        )
    if strategy == "STRICT_PACK" and not any(_fits(needed, node) for node in nodes):
        return PlacementHint(f"waiting for one node that can hold every worker (STRICT_PACK, {_amounts(needed)})", True)
    if strategy == "STRICT_SPREAD" and sum(_fits(bundle, node) for node in nodes) < num_workers:
        return PlacementHint(f"waiting for {num_workers} nodes that can each hold one worker (STRICT_SPREAD)", True)
    if short := _short(needed, available):
        return PlacementHint(f"waiting for resources in use by other runs: the run needs {short} available")
    return PlacementHint("waiting for Ray to place the workers")


def cluster_view() -> tuple[dict[str, float], dict[str, float], list[dict[str, float]]]:
    """Ray's total and available resources and each alive node's total (blocking calls)."""
    nodes = [dict(node.get("Resources", {})) for node in ray.nodes() if node.get("Alive")]
    return ray.cluster_resources(), ray.available_resources(), nodes


def _short(needed: Mapping[str, float], have: Mapping[str, float]) -> str:
    return ", ".join(
        f"{_amount(name, amount)} (has {_amount(name, have.get(name, 0.0))})"
        for name, amount in sorted(needed.items())
        if amount > have.get(name, 0.0) + _EPSILON
    )


def _fits(needed: Mapping[str, float], node: Mapping[str, float]) -> bool:
    return all(amount <= node.get(name, 0.0) + _EPSILON for name, amount in needed.items() if amount > 0)


def _amounts(resources: Mapping[str, float]) -> str:
    return ", ".join(_amount(name, amount) for name, amount in sorted(resources.items()) if amount > 0)


def _amount(name: str, amount: float) -> str:
    if name == "memory":
        return f"{amount / 2**30:.2f} GiB memory"
    return f"{amount:g} {name}"
