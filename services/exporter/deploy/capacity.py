"""Runs in: the exporter process.

Whether a deployment's replicas could ever be placed on the Ray cluster.

A deployment that needs more than the whole cluster has would wait for resources forever, so
CreateDeployment and UpdateDeployment refuse it, naming the field and the figures, as the
scheduler says of a job ("needs 64 CPUs; the cluster has 2"). The cluster is judged empty:
what other deployments and jobs hold now is no reason to refuse (they end). The replicas
counted are the fewest a deployment runs (num_replicas, or autoscaling's min_replicas, at
least 1), so only what can never fit is refused. Judged on the nodes' totals as Ray reports
them; while the exporter is not connected to the cluster, nothing is refused here (the
deployment then says UNHEALTHY with Serve's reason).
"""

from __future__ import annotations

import asyncio
import logging

from paddleray.exporter.v1 import deployment_pb2
from paddleray.services.common.ray_connection import RayConnection, in_daemon_thread
from paddleray.services.common.resources import FIELDS, Amounts, milli, quantity, unit_text

log = logging.getLogger(__name__)
_TIMEOUT_S = 5.0


async def node_totals(ray: RayConnection) -> list[dict[str, float]] | None:
    """Each alive node's total resources, or None when they cannot be known now."""
    if not ray.connected:
        return None
    try:
        return await asyncio.wait_for(in_daemon_thread(_alive_node_totals), _TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - Ray away or slow: the deployment is not judged
        log.debug("cluster resources unknown: %r", exc)
        return None


def _alive_node_totals() -> list[dict[str, float]]:
    import ray

    return [dict(node.get("Resources") or {}) for node in ray.nodes() if node.get("Alive")]


def replicas_at_least(deployment: deployment_pb2.Deployment) -> int:
    if deployment.HasField("autoscaling"):
        return max(deployment.autoscaling.min_replicas, 1)
    return deployment.num_replicas or 1


def never_fits(deployment: deployment_pb2.Deployment, nodes: list[dict[str, float]] | None) -> str:
    """Why the deployment's replicas cannot be placed even on the empty cluster ("" when they
    can, or when the nodes are not known)."""
    if not nodes:
        return ""
    res = deployment.resources_per_replica
    count = replicas_at_least(deployment)
    # As the reconciler serves it: a replica takes 1 CPU unless it asks for another amount.
    replica = Amounts(milli(res.num_cpus or 1.0), milli(res.num_gpus), res.memory_bytes)
    totals = [Amounts(milli(n.get("CPU", 0.0)), milli(n.get("GPU", 0.0)), int(n.get("memory", 0.0))) for n in nodes]
    for name, amount in sorted(res.custom.items()):
        largest = max(n.get(name, 0.0) for n in nodes)
        if amount > largest:
            return (f"each replica needs {amount:g} of resource {name!r}; "
                    + (f"the largest node has {largest:g}" if largest else "no node of the cluster has it"))
    for field in FIELDS:
        needed, has = getattr(replica, field) * count, sum(getattr(t, field) for t in totals)
        if needed > has:
            return f"{count} replica{'s' if count > 1 else ''} need{'' if count > 1 else 's'} " \
                   f"{unit_text(field, needed)}; the cluster has {quantity(field, has)}"
    for field in FIELDS:
        needed, largest = getattr(replica, field), max(getattr(t, field) for t in totals)
        if needed > largest:
            return f"each replica needs {unit_text(field, needed)}; the largest node has {quantity(field, largest)}"
    room = sum(_holds(t, replica) for t in totals)
    if room < count:
        return f"the nodes have room for {room} of its {count} replicas, even with nothing else running"
    return ""


def _holds(total: Amounts, replica: Amounts) -> int:
    counts = [getattr(total, f) // getattr(replica, f) for f in FIELDS if getattr(replica, f) > 0]
    return min(counts) if counts else 1 << 30
