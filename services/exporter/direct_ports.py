"""The port of each deployment's own v2 endpoint (serving/replica_endpoint.py), kept in Redis.

A deployment keeps its port for its whole life, across exporter and Ray head restarts, so
clients can pin it. The reconciler gives every deployment one (`assign`) before it deploys
them and frees the ports of deployments that are gone; the manager shows it on the resource.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Collection

import redis.asyncio as aioredis
from redis.exceptions import WatchError

from paddleray.services.exporter import keys

log = logging.getLogger(__name__)


def parse_range(text: str) -> range:
    """"FIRST-LAST" (inclusive) -> the ports; "" -> none (direct endpoints off)."""
    if not text.strip():
        return range(0)
    first, _, last = text.partition("-")
    low, high = int(first), int(last or first)
    if not 1 <= low <= high <= 65535:
        raise ValueError(f"a port range FIRST-LAST within 1-65535, not {text!r}")
    return range(low, high + 1)


def bindable(host: str, port: int) -> bool:
    """Whether nothing on this host listens there now (another installation, another service)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


class DirectPorts:
    def __init__(self, client: aioredis.Redis, ports: range, bind_host: str = "127.0.0.1") -> None:
        self._client = client
        self.ports = ports
        self._bind_host = bind_host

    @property
    def enabled(self) -> bool:
        return len(self.ports) > 0

    async def _claims(self) -> dict[int, str]:
        """Port -> the deployment id that claimed it."""
        return {int(p): o.decode() for p, o in (await self._client.hgetall(keys.direct_ports())).items()}

    async def assigned(self) -> dict[str, int]:
        """Deployment id -> its port (the lowest, should a race have given it two)."""
        found: dict[str, int] = {}
        for port, owner in sorted((await self._claims()).items(), reverse=True):
            found[owner] = port
        return found

    async def assign(self, deployment_ids: Collection[str]) -> dict[str, int]:
        """Every deployment listed gets a port (it keeps the one it has); others' ports are freed.

        A deployment that finds no free port is left out (and logged): it is served through
        Serve's proxy only.
        """
        if not self.enabled:
            return {}
        claims = await self._claims()
        wanted = set(deployment_ids)
        kept: dict[str, int] = {}
        for port in sorted(claims):
            owner = claims[port]
            if owner in wanted and owner not in kept and port in self.ports:
                kept[owner] = port
            else:
                await self._free(port, owner)
        taken = set(kept.values())
        for deployment_id in sorted(wanted - kept.keys()):
            for port in self.ports:
                if port in taken or not bindable(self._bind_host, port):
                    continue
                taken.add(port)
                if await self._client.hsetnx(keys.direct_ports(), str(port), deployment_id):
                    kept[deployment_id] = port
                    break
            else:
                log.warning("no free port in %s-%s for the v2 endpoint of deployment %s: served through "
                            "Serve's proxy only", self.ports.start, self.ports.stop - 1, deployment_id)
        return kept

    async def _free(self, port: int, owner: str) -> None:
        """Deletes the claim only if it is still `owner`'s (another replica may have re-claimed it)."""
        async with self._client.pipeline(transaction=True) as pipe:
            try:
                await pipe.watch(keys.direct_ports())
                if (await pipe.hget(keys.direct_ports(), str(port))) != owner.encode():
                    return
                pipe.multi()
                pipe.hdel(keys.direct_ports(), str(port))
                await pipe.execute()
            except WatchError:
                return
