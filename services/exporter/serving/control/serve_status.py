"""Runs in: the exporter process.

Serve's live state as the exporter reports it: per serving name and version, the state Serve
gives its application (VersionState), its replicas per node and why a version is not served.

`status()` also asks every model through the endpoints clients use (gRPC ModelReady with the
model's `application` metadata, REST GET .../ready): a version is READY only while a request
sent there would be answered. ServingController (controller.py) is built on ServeStatus.
"""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import grpc

from paddleray.services.common import ray_private
from paddleray.services.common.ray_connection import in_daemon_thread
from paddleray.services.exporter.serving.control import serve_config as sc
from paddleray.services.exporter.serving.spec import MODEL_DEPLOYMENT

_PROBE_TIMEOUT_S = 3.0


class VersionState(StrEnum):
    """A served version's live state. String-valued: each equals its name, as JSON and logs show it."""

    DEPLOYING = "DEPLOYING"
    READY = "READY"  # a request sent to the endpoints clients are shown is answered
    UNHEALTHY = "UNHEALTHY"
    FAILED = "FAILED"
    DELETING = "DELETING"


# Serve's application status -> ours; a status a later Serve adds counts as DEPLOYING (not READY).
_APP_STATES = {"RUNNING": VersionState.READY, "DEPLOYING": VersionState.DEPLOYING,
               "DEPLOY_FAILED": VersionState.FAILED, "UNHEALTHY": VersionState.UNHEALTHY,
               "DELETING": VersionState.DELETING, "NOT_STARTED": VersionState.DEPLOYING}


@dataclass
class VersionStatus:
    version: str
    state: VersionState
    running_replicas: int = 0
    target_replicas: int = 0
    # Whether the model's replicas route requests to this version, and with which weight.
    serving: bool = False
    weight: float = 0.0
    message: str = ""
    # Running replicas by node: (node id, node ip, count), most replicas first.
    replicas_per_node: list[tuple[str, str, int]] = field(default_factory=list)
    # False when Serve runs the version but the endpoints clients use did not answer for it
    # (the probe made it UNHEALTHY): the reconciler tells a deploy not answering yet from a lost one.
    answered: bool = True

    def __post_init__(self) -> None:
        # A state given by its name (from JSON, a test) becomes the member; any other string is refused.
        self.state = VersionState(self.state)


@dataclass
class ServedModelStatus:
    serving_name: str
    versions: dict[str, VersionStatus] = field(default_factory=dict)


class ServeStatus:
    """status() of ServingController: Serve's details, the last apply's failures and the probes."""

    endpoints: Callable[[], tuple[str, str]]
    _probe: bool
    _failures: dict[tuple[str, str], str]
    _unplaced_apps: dict[str, str]

    async def status(self) -> dict[str, ServedModelStatus]:
        """Live state per serving name and version, from Serve and from the endpoints."""
        details = (await in_daemon_thread(self._details)).get("applications") or {}
        found: dict[str, ServedModelStatus] = {}
        for name, app in details.items():
            if name == sc.SERVER_APP:
                continue
            table = sc.deployed_table(app.get("deployed_app_config"))
            deployment = (app.get("deployments") or {}).get(MODEL_DEPLOYMENT) or {}
            replicas = deployment.get("replicas") or []
            state = _APP_STATES.get(_value(app.get("status")), VersionState.DEPLOYING)
            message = str(app.get("message") or deployment.get("message") or "")
            if state is VersionState.DEPLOYING and name in self._unplaced_apps and "resources" not in message:
                message = self._unplaced_apps[name]  # before Serve says so itself (after 30 s)
            model = found[name] = ServedModelStatus(name)
            running = [r for r in replicas if r.get("state") == "RUNNING"]
            per_node = _per_node(running)
            for version, entry in (table.get("versions") or {}).items():
                failure = self._failures.get((name, version)) or self._failures.get((name, "*"))
                model.versions[version] = VersionStatus(
                    version=version,
                    state=VersionState.FAILED if failure and state is VersionState.READY else state,
                    running_replicas=len(running),
                    target_replicas=int(deployment.get("target_num_replicas") or 0),
                    serving=failure is None,
                    weight=float(entry.get("weight", 0.0)),
                    message=failure or message,
                    replicas_per_node=list(per_node),
                )
        if self._probe:
            await asyncio.gather(*(self._probe_model(m) for m in found.values()
                                   if any(v.state is VersionState.READY for v in m.versions.values())))
        return found

    async def _probe_model(self, model: ServedModelStatus) -> None:
        """READY versions become UNHEALTHY unless a request to the endpoints clients use is answered."""
        problem = await in_daemon_thread(lambda: self._probe_grpc(model.serving_name)) or \
            await in_daemon_thread(lambda: self._probe_http(model.serving_name))
        if problem:
            for version in model.versions.values():
                if version.state is VersionState.READY:
                    version.state, version.message, version.answered = VersionState.UNHEALTHY, problem, False

    def _probe_grpc(self, name: str) -> str:
        from paddleray.inference.v2 import grpc_service_pb2 as pb
        from paddleray.inference.v2 import grpc_service_pb2_grpc
        from paddleray.services.common.channels import open_blocking_channel

        target = self.endpoints()[0]
        with open_blocking_channel(target) as channel:
            stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
            try:
                answer = stub.ModelReady(pb.ModelReadyRequest(name=name), metadata=(("application", name),),
                                         timeout=_PROBE_TIMEOUT_S)
            except grpc.RpcError as exc:
                return f"not answering on the gRPC endpoint {target}: {exc.code().name} {(exc.details() or '')[:200]}"
        # Answered but not ready: the server app's word for a model whose own app does not answer.
        return "" if answer.ready else f"not ready on the gRPC endpoint {target}"

    def _probe_http(self, name: str) -> str:
        url = f"{self.endpoints()[1]}{sc.route_prefix(name)}/ready"
        try:
            with urllib.request.urlopen(url, timeout=_PROBE_TIMEOUT_S) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            return f"not answering on the REST endpoint {url}: HTTP {exc.code}"
        except OSError as exc:
            return f"not answering on the REST endpoint {url}: {exc}"
        return ""

    def _details(self) -> dict[str, Any]:
        return ray_private.serve_details()


def _per_node(replicas: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    """(node id, node ip, replicas) of the replicas given, most replicas first, then by node id."""
    counts: dict[tuple[str, str], int] = {}
    for replica in replicas:
        key = (str(replica.get("node_id") or ""), str(replica.get("node_ip") or ""))
        counts[key] = counts.get(key, 0) + 1
    return sorted(((node, ip, n) for (node, ip), n in counts.items()), key=lambda e: (-e[2], e[0]))


def _value(status: Any) -> str:
    """Serve's status enums (str subclasses) as their plain value."""
    return str(getattr(status, "value", status))
