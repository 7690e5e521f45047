"""RayLink: the exporter's connection to its Ray cluster, its health, and restarts of the cluster.

The exporter is a Ray driver of the configured cluster (never a local one it would start by
itself). The cluster is identified by its head node's id: after a Ray head restart the id
changes, and the reconciler deploys everything again on the new cluster.
"""

from __future__ import annotations

import asyncio
import logging

import ray

log = logging.getLogger(__name__)


class RayLink:
    def __init__(self, address: str, check_timeout_s: float = 5.0) -> None:
        self.address = address
        self.check_timeout_s = check_timeout_s
        self._check: asyncio.Task | None = None
        self.cluster_id = ""

    async def connect(self) -> None:
        """Joins the configured cluster unless this process already is a driver of one."""
        if not ray.is_initialized():
            await asyncio.to_thread(ray.init, address=self.address, namespace="paddleray", log_to_driver=False)
        self.cluster_id = await asyncio.to_thread(_head_node_id)

    async def reconnect(self) -> None:
        """A new driver session: after a head restart the old one points at a cluster that is gone."""
        self.cluster_id = ""
        await asyncio.to_thread(ray.shutdown)
        await self.connect()

    async def identity(self) -> str | None:
        """The head node id of the cluster now, None when it cannot be reached in time.

        One check in flight at a time: a call stuck on a dead cluster is not stacked on. Never
        before connect(): Ray's APIs would start a local cluster of their own.
        """
        if not ray.is_initialized():
            return None
        if self._check is None or self._check.done():
            self._check = asyncio.ensure_future(asyncio.to_thread(_head_node_id))
        try:
            return await asyncio.wait_for(asyncio.shield(self._check), self.check_timeout_s)
        except Exception:  # noqa: BLE001 - unreachable for now, whatever the reason
            return None

    def connected(self) -> bool:
        return bool(self.cluster_id) and ray.is_initialized()

    async def reachable(self) -> bool:
        return ray.is_initialized() and await self.identity() is not None


def _head_node_id() -> str:
    for node in ray.nodes():
        if node.get("Alive") and node.get("Resources", {}).get("node:__internal_head__"):
            return node["NodeID"]
    raise RuntimeError("the Ray cluster has no live head node")
