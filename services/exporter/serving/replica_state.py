"""Runs in: a Serve replica (publishes) and the exporter process (the controller reads).

What each model replica serves, reported in the GCS key-value store for the controller.

A replica applies its model's routing table (its user_config: versions, weights, predictor
and batching) in `reconfigure`, in place, and then writes a report under
`serving/<app>/<replica id>` (namespace `paddleray`): the table's generation, the versions
it routes, and why any version could not be loaded. The controller waits until every RUNNING
replica of an app reports a generation before it calls a change applied, and shows the
failures. No DeploymentHandle is made for that: in Serve's throughput-optimized mode a handle
needs an event loop of its caller's, and in the exporter a handle's router thread outlived a
lost cluster (routing_wait's history). Reports of replicas that are gone are ignored (only
RUNNING replica ids count) and removed by the replica when it stops, or by `sweep`.

Every call blocks on the GCS with a timeout: run them in a thread.
"""

from __future__ import annotations

import json
from typing import Any

from paddleray.services.common import ray_private

NAMESPACE = b"paddleray"
PREFIX = "serving/"
TIMEOUT_S = 5


def _key(app: str, replica_id: str) -> bytes:
    return f"{PREFIX}{app}/{replica_id}".encode()


def publish(app: str, replica_id: str, report: dict[str, Any]) -> None:
    ray_private.gcs_client().internal_kv_put(_key(app, replica_id), json.dumps(report).encode(), True, NAMESPACE,
                                             timeout=TIMEOUT_S)


def withdraw(app: str, replica_id: str) -> None:
    ray_private.gcs_client().internal_kv_del(_key(app, replica_id), False, NAMESPACE, timeout=TIMEOUT_S)


def reports(app: str | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    """(app, replica id) -> its last report, for one app or all."""
    gcs = ray_private.gcs_client()
    keys = gcs.internal_kv_keys(f"{PREFIX}{app}/".encode() if app else PREFIX.encode(), NAMESPACE, timeout=TIMEOUT_S)
    if not keys:
        return {}
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for key, value in gcs.internal_kv_multi_get(list(keys), NAMESPACE, timeout=TIMEOUT_S).items():
        app_name, _, replica_id = key.decode().removeprefix(PREFIX).rpartition("/")
        try:
            found[app_name, replica_id] = json.loads(value)
        except ValueError:
            continue
    return found


def sweep(live: set[tuple[str, str]]) -> None:
    """Removes the reports of replicas not in `live` ((app, replica id) pairs)."""
    gcs = ray_private.gcs_client()
    for app, replica_id in set(reports()) - live:
        gcs.internal_kv_del(_key(app, replica_id), False, NAMESPACE, timeout=TIMEOUT_S)
