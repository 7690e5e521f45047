"""Runs in: the exporter process.

ServingController: the exporter's one entry point into serving on Ray Serve.

The serving path (measured against the own per-deployment endpoints it replaced and against
KServe: serving/README.md): Ray Serve's high-throughput ingress, HAProxy in front of
direct-ingress replicas (RAY_SERVE_ENABLE_HA_PROXY=1, RAY_SERVE_THROUGHPUT_OPTIMIZED=1 on every
Ray node: node_env.py). Each served model is an application whose ingress is the model's own
deployment (serve_config.py), so a request goes client -> HAProxy -> a replica that holds the
predictors: no proxy actor, no ingress hop, on one node or many, locally, in compose and on
KubeRay alike. HAProxy binds the configured host on the gRPC and HTTP ports.

`apply(models)` takes the desired state of every served model and moves Serve there without
failing a request: one declarative deploy; a model's versions, weights, predictor options and
batching are its deployment's user_config, so a rollout reconfigures its replicas in place
(model_app.py); `apply` returns once every RUNNING replica of every changed model reports the
new table (replica_state.py), with the versions that failed to load recorded for `status()`.

`status()`, Serve's live state checked against the endpoints clients use, is serve_status.py's
(ServeStatus, which ServingController is built on).

The exporter process is a Ray driver of the cluster; the controller uses Serve's client in
it. Serve state lives in the cluster, so a restarted exporter attaches to the running
instance (`start()`), and after a Ray head restart `start()` + `apply()` deploy everything
again. Before Serve is started on a cluster, the ports are checked on the head node: one held
by another process (another installation on the host) is replaced by a free port, and
`endpoint_note` says so (the deployments show it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from paddleray.services.common import ray_private
from paddleray.services.common.errors import FailedPrecondition, Unavailable
from paddleray.services.common.ray_connection import in_daemon_thread
from paddleray.services.exporter.serving import replica_state
from paddleray.services.exporter.serving.artifact import load_artifact
from paddleray.services.exporter.serving.control import serve_config as sc
from paddleray.services.exporter.serving.control.ports import choose_ports
from paddleray.services.exporter.serving.control.serve_status import ServeStatus, _value
from paddleray.services.exporter.serving.replica.grpc_services import SERVICER_FUNCTIONS
from paddleray.services.exporter.serving.spec import MODEL_DEPLOYMENT, ServedModel, validate_models

logger = logging.getLogger(__name__)
_POLL_S = 0.25
# _wait_apps' result for an app whose replicas wait for resources no node has free.
_UNPLACED = "waiting for resources"


class ServingController(ServeStatus):
    def __init__(
        self,
        grpc_port: int = 9000,
        http_host: str = "127.0.0.1",
        http_port: int = 8000,
        request_timeout_s: float = 30.0,
        deploy_timeout_s: float = 180.0,
        endpoints: Callable[[], tuple[str, str]] | None = None,
        probe: bool = True,
    ) -> None:
        """http_host: the address HAProxy binds for gRPC and REST. endpoints: the gRPC address
        and the REST base URL clients are shown, which status() asks (default: this host's
        ports, loopback for a wildcard host); probe=False skips asking."""
        self.grpc_port = grpc_port
        self.http_host = http_host
        self.http_port = http_port
        self._request_timeout_s = request_timeout_s
        self._deploy_timeout_s = deploy_timeout_s
        self.endpoints = endpoints or self.local_endpoints
        self._probe = probe
        # Why the endpoints are not on the configured ports ("" when they are).
        self.endpoint_note = ""
        self._lock = asyncio.Lock()
        # Why versions of the last apply are not served, by (serving name, version).
        self._failures: dict[tuple[str, str], str] = {}
        self._unplaced_apps: dict[str, str] = {}  # apps the last apply left waiting for resources, and why

    def local_endpoints(self) -> tuple[str, str]:
        """(gRPC address, REST base URL) of the endpoints on this host."""
        host = "127.0.0.1" if self.http_host in ("0.0.0.0", "::", "") else self.http_host
        return f"{host}:{self.grpc_port}", f"http://{host}:{self.http_port}"

    # -- Serve ------------------------------------------------------------------------------------
    async def start(self, known: Sequence[str] = ()) -> None:
        """Starts Serve with HAProxy and the server app; attaches when they already run.
        known: the model names the registry serves (sc.server_app says why)."""
        async with self._lock:
            running = await in_daemon_thread(ray_private.serve_controller_running)
            if not running:
                await self._choose_ports()
            await in_daemon_thread(lambda: self._start(known))
            await self._wait_apps([sc.SERVER_APP])

    async def _choose_ports(self) -> None:
        wanted = (self.grpc_port, self.http_port)
        chosen = await choose_ports(self.http_host, wanted)
        if chosen != wanted:
            held = [str(p) for p, c in zip(wanted, chosen, strict=True) if p != c]
            self.endpoint_note = (f"port {', '.join(held)} of {self.http_host} is held by another process on the Ray "
                                  f"head: serving gRPC on {chosen[0]} and REST on {chosen[1]} instead")
            logger.warning("%s", self.endpoint_note)
            self.grpc_port, self.http_port = chosen

    def _start(self, known: Sequence[str]) -> None:
        from ray import serve

        serve.start(
            proxy_location="HeadOnly",
            http_options={"host": self.http_host, "port": self.http_port},
            grpc_options={"port": self.grpc_port, "grpc_servicer_functions": SERVICER_FUNCTIONS},
        )
        details = self._details()
        # Serve keeps the options it was first started with: attached to a Serve that an earlier
        # exporter started on other ports, the endpoints are those, not ours.
        grpc_port = int((details.get("grpc_options") or {}).get("port") or self.grpc_port)
        http_port = int((details.get("http_options") or {}).get("port") or self.http_port)
        if (grpc_port, http_port) != (self.grpc_port, self.http_port):
            logger.warning("Ray Serve on this cluster serves gRPC on %d and REST on %d (started so before this "
                           "exporter): deployments report those", grpc_port, http_port)
            self.grpc_port, self.http_port = grpc_port, http_port
        apps = details.get("applications") or {}
        if sc.SERVER_APP not in apps:
            deployed = _deployed(apps)
            self._deploy_sync([sc.server_app([*known, *deployed]), *deployed.values()])

    async def stop(self, shutdown_serve: bool = False) -> None:
        """Detaches; Serve keeps serving (a restarted exporter attaches again) unless shutdown_serve."""
        if shutdown_serve:
            from ray import serve

            async with self._lock:
                await in_daemon_thread(serve.shutdown)

    # -- the desired state ------------------------------------------------------------------------
    async def apply(self, models: list[ServedModel]) -> None:
        """Makes `models` the whole served state; returns when every replica serves by it.

        InvalidArgument / FailedPrecondition (bad spec, missing artifact or backend) before
        anything changes; versions that fail to load are reported by status(), not raised.
        """
        validate_models(models)
        async with self._lock:
            await in_daemon_thread(lambda: _check_artifacts(models))
            deployed = _deployed((await in_daemon_thread(self._details)).get("applications") or {})
            desired: dict[str, dict[str, Any]] = {}
            for model in models:
                app = sc.model_app(model, 0, self._request_timeout_s)
                current = sc.deployed_table(deployed.get(model.serving_name))
                generation = int(current.get("generation", 0))
                new_table = sc.deployed_table(app)
                if {k: v for k, v in current.items() if k != "generation"} != \
                        {k: v for k, v in new_table.items() if k != "generation"}:
                    generation += 1
                desired[model.serving_name] = sc.model_app(model, generation, self._request_timeout_s)
            await in_daemon_thread(lambda: self._deploy_sync([sc.server_app(list(desired)), *desired.values()]))
            demands = {m.serving_name: _demand(m) for m in models}
            results = await self._wait_apps(list(desired), raise_on_timeout=False, demands=demands)
            failures: dict[tuple[str, str], str] = {}
            unplaced: dict[str, str] = {}
            for name, app in desired.items():
                if results.get(name) == _UNPLACED:
                    # Serve places it once resources free up; status() says it waits meanwhile.
                    unplaced[name] = f"insufficient resources: a replica needs {_shown(demands[name])}, which no node has free"
                    continue
                if results.get(name):
                    for version in sc.deployed_table(app)["versions"]:
                        failures[name, version] = results[name]
                    continue
                reported = await self._wait_reports(name, int(sc.deployed_table(app)["generation"]))
                for version, why in reported.items():
                    failures[name, version] = why
            self._failures, self._unplaced_apps = failures, unplaced
            await in_daemon_thread(lambda: _sweep_reports(self._details))

    async def _unplaced(self, pending: list[str], demands: dict[str, dict[str, float]]) -> list[str]:
        try:
            return await _unplaced_apps(pending, demands, self._details)
        except Exception as exc:  # noqa: BLE001 - not known now: waited on as before
            logger.debug("could not judge the placement of %s: %r", pending, exc)
            return []

    async def _wait_reports(self, app: str, generation: int) -> dict[str, str]:
        """Until every RUNNING replica of the app reports `generation`; its failed versions."""
        deadline = time.monotonic() + self._deploy_timeout_s
        while True:
            running = await in_daemon_thread(lambda: self._running_replicas(app))
            reports = await in_daemon_thread(lambda: replica_state.reports(app))
            mine = [reports.get((app, r)) for r in running]
            if running and all(r is not None and r.get("generation") == generation for r in mine):
                failed: dict[str, str] = {}
                for report in mine:
                    assert report is not None
                    failed.update(report.get("failed") or {})
                return failed
            if time.monotonic() > deadline:
                raise Unavailable(f"model app {app}: its replicas did not take routing table {generation} "
                                  f"within {self._deploy_timeout_s:g} s")
            await asyncio.sleep(_POLL_S)

    def _running_replicas(self, app: str) -> list[str]:
        details = (self._details().get("applications") or {}).get(app) or {}
        deployment = (details.get("deployments") or {}).get(MODEL_DEPLOYMENT) or {}
        return [r["replica_id"] for r in deployment.get("replicas") or [] if r.get("state") == "RUNNING"]
    def _deploy_sync(self, apps: list[dict[str, Any]]) -> None:
        """Serve's declarative deploy (what `serve deploy` and KubeRay's RayService do), not
        serve.run: the apps are import paths built in the replicas, not in this process, and a
        changed user_config reconfigures the running replicas in place. Through ray_private
        (why there: its docstring)."""
        from ray.serve.schema import ServeDeploySchema

        # Validated before it reaches the controller: a config it rejects later takes apps down.
        schema = ServeDeploySchema.model_validate(sc.deploy_config(apps))
        ray_private.serve_deploy(schema)

    async def _wait_apps(self, names: list[str], raise_on_timeout: bool = True,
                         demands: dict[str, dict[str, float]] | None = None) -> dict[str, str]:
        """'' per app once RUNNING, else why it is not (DEPLOY_FAILED, or not ready in time).

        With `demands` (an app's resources per replica), an app whose replicas wait for resources
        that no node has free is not waited on (_UNPLACED): Serve places it by itself once they
        free up, and a pass that waited out its deploy timeout held every other deployment's
        change and delete behind it (a traffic update took 353 s, issue 21 point 5).
        """
        from ray import serve

        deadline = time.monotonic() + self._deploy_timeout_s
        results: dict[str, str] = {}
        while True:
            apps = (await in_daemon_thread(serve.status)).applications
            for name in names:
                app = apps.get(name)
                if app is not None and _value(app.status) == "RUNNING":
                    results[name] = ""
                elif app is not None and _value(app.status) == "DEPLOY_FAILED":
                    results[name] = f"failed to start: {app.message[:500]}"
            pending = [n for n in names if n not in results]
            if pending and demands:
                for name in await self._unplaced(pending, demands):
                    results[name] = _UNPLACED
                pending = [n for n in names if n not in results]
            if not pending:
                return results
            if time.monotonic() > deadline:
                if raise_on_timeout:
                    raise Unavailable(f"Serve applications {pending} not running after {self._deploy_timeout_s:g} s")
                for name in pending:
                    app = apps.get(name)
                    results[name] = f"not ready after {self._deploy_timeout_s:g} s: {app.message[:500] if app else 'absent'}"
                return results
            await asyncio.sleep(_POLL_S)


async def _unplaced_apps(pending: list[str], demands: dict[str, dict[str, float]],
                         details: Callable[[], dict[str, Any]]) -> list[str]:
    """The pending apps with a replica still to start for which no node has its resources free.

    Only apps short of replicas with none running or starting on a node are judged (a replica
    that was placed holds its resources, and one reconfigured in place is not starting), so an
    app that is merely slow to start is waited on as before."""

    applications = (await in_daemon_thread(details)).get("applications") or {}
    waiting = []
    for name in pending:
        deployment = ((applications.get(name) or {}).get("deployments") or {}).get(MODEL_DEPLOYMENT) or {}
        replicas = deployment.get("replicas") or []
        placed = [r for r in replicas if r.get("node_id") or r.get("state") == "RUNNING"]
        if len(placed) < int(deployment.get("target_num_replicas") or 1) and name in demands:
            waiting.append(name)
    if not waiting:
        return []
    free = list((await in_daemon_thread(ray_private.available_resources_per_node)).values())
    return [name for name in waiting if not any(_fits(demands[name], node) for node in free)]


def _demand(model: ServedModel) -> dict[str, float]:
    """A replica's resources as Ray names them (model_app's ray_actor_options)."""
    demand = {"CPU": model.num_cpus, "GPU": model.num_gpus, "memory": float(model.memory or 0)}
    return {k: v for k, v in demand.items() if v}


def _shown(demand: dict[str, float]) -> str:
    return ", ".join(f"{amount:g} {resource}" for resource, amount in demand.items()) or "nothing"


def _fits(demand: dict[str, float], free: dict[str, float]) -> bool:
    return all(free.get(resource, 0.0) + 1e-9 >= amount for resource, amount in demand.items())


def _deployed(details: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Deployed configs of the model apps, by name; apps being deleted have none and are left out."""
    return {
        name: app["deployed_app_config"]
        for name, app in details.items()
        if name != sc.SERVER_APP and app.get("deployed_app_config") and _value(app.get("status")) != "DELETING"
    }

def _check_artifacts(models: list[ServedModel]) -> None:
    for i, model in enumerate(models):
        for j, version in enumerate(model.versions):
            artifact = load_artifact(version.artifact_dir)
            if not artifact.has_backend(version.backend):
                raise FailedPrecondition(
                    f"models[{i}].versions[{j}].backend: {version.backend} needs an onnx artifact, and {artifact.root} has none"
                )


def _sweep_reports(details) -> None:
    """Drops the reports of replicas that are gone (best effort)."""
    try:
        live = {(name, r["replica_id"]) for name, app in (details().get("applications") or {}).items()
                for d in (app.get("deployments") or {}).values() for r in d.get("replicas") or []}
        replica_state.sweep(live)
    except Exception as exc:  # noqa: BLE001 - stale reports are ignored anyway
        logger.debug("could not sweep replica reports: %r", exc)
