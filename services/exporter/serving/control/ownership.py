"""Runs in: the exporter process.

Which paddleray installation manages Ray Serve on a cluster.

Ray Serve is one per cluster, and the exporter declares the whole of it (`deploy_apps`: apps
left out are deleted). Two paddleray installations on one cluster (two stacks, or a test stack
beside another) would each delete the other's apps on every pass. So the exporter that serves
records its installation (an id kept in its Redis, shared by its replicas) and its driver's
job in the GCS key-value store, and an exporter of another installation refuses to touch Serve
while that driver is alive: its deployments say UNHEALTHY, naming why. An owner whose driver
has ended (stopped or killed: the GCS marks its job dead), or that is this very driver (an
earlier exporter of this process, as in tests), is taken over.

Checked before every reconcile pass; two exporters of different installations starting in the
same second could each apply once before the later one sees the other's record.

The record also names the models the installation last applied (`record_served`): an exporter
whose Redis came back empty learns from it that Serve still runs them (store_guard.py).
"""

from __future__ import annotations

import json
import logging

from paddleray.services.common import errors, ray_private

log = logging.getLogger(__name__)

_KEY = b"paddleray/serve-owner"
_NAMESPACE = b"paddleray"
_TIMEOUT_S = 5  # a key-value call on a live GCS takes milliseconds; a dead one holds the reconnect (ray_connection.QUIESCE_S)


class ServeOwnership:
    def __init__(self, installation: str = "") -> None:
        # Read from the exporter's Redis by the reconciler before its first claim.
        self.installation = installation

    def claim(self) -> None:
        """Records this installation as Serve's manager, or raises FailedPrecondition when a live
        exporter of another installation is. Blocking (GCS calls): run it in a thread."""
        import ray

        gcs = ray_private.gcs_client()
        me = {"installation": self.installation, "job": ray.get_runtime_context().get_job_id()}
        raw = gcs.internal_kv_get(_KEY, _NAMESPACE, timeout=_TIMEOUT_S)
        owner = _parse(raw)
        if owner and {k: owner.get(k) for k in me} == me:
            return
        if owner and owner.get("installation") != self.installation:
            if owner.get("job") != me["job"] and _job_alive(gcs, str(owner.get("job", ""))):
                raise errors.FailedPrecondition(
                    f"Ray Serve on this cluster is managed by another paddleray installation (its exporter, "
                    f"Ray job {owner.get('job')}, is running): one installation per Ray cluster serves; "
                    "give this one a cluster of its own"
                )
            log.warning("taking over Ray Serve from paddleray installation %s (its exporter has ended)",
                        owner.get("installation"))
        if owner and owner.get("installation") == self.installation:
            me["served"] = owner.get("served")  # the same installation's: still served
        gcs.internal_kv_put(_KEY, json.dumps(me).encode(), True, _NAMESPACE, timeout=_TIMEOUT_S)

    def record_served(self, served: list[str]) -> None:
        """After an apply: the serving names this installation runs on Serve. Blocking."""
        import ray

        me = {"installation": self.installation, "job": ray.get_runtime_context().get_job_id(), "served": sorted(served)}
        ray_private.gcs_client().internal_kv_put(_KEY, json.dumps(me).encode(), True, _NAMESPACE, timeout=_TIMEOUT_S)

    def owner(self) -> dict | None:
        """The record of the installation that manages Serve (installation, job, served: the names
        it last applied, or None when it never recorded them), with `alive`: whether its exporter
        runs. None when no installation does. Blocking."""
        gcs = ray_private.gcs_client()
        owner = _parse(gcs.internal_kv_get(_KEY, _NAMESPACE, timeout=_TIMEOUT_S))
        if owner is None:
            return None
        return {**owner, "alive": _job_alive(gcs, str(owner.get("job", "")))}


def _parse(raw: bytes | None) -> dict | None:
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _job_alive(gcs, job_hex: str) -> bool:
    for job_id, info in gcs.get_all_job_info(timeout=_TIMEOUT_S).items():
        if job_id.hex() == job_hex:
            return not info.is_dead
    return False
