"""ServingController: the exporter's one entry point into serving on Ray Serve.

`apply(models)` takes the desired state of every served model and moves Serve there without
failing a request: (1) start the apps of new or replaced versions beside the running ones,
wait until they are ready; (2) switch the ingress's routing table (a user_config change:
the ingress reconfigures in place, no restart) and wait until it took it; (3) delete the apps
nothing routes to any more (their replicas drain in-flight requests). A version whose app
fails to start is not routed; a version it replaces keeps serving.

The exporter process is a Ray driver connected to the cluster; the controller uses Serve's
client in that process. Serve state lives in the cluster, so a restarted exporter attaches to
the running instance (`start()`), and after a Ray head restart `start()` + `apply()` deploy
everything again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from paddleray.services.common.errors import FailedPrecondition, Unavailable
from paddleray.services.exporter.serving import serve_config as sc
from paddleray.services.exporter.serving.artifact import load_artifact
from paddleray.services.exporter.serving.ingress import SERVICER
from paddleray.services.exporter.serving.routing_wait import wait_for_generation
from paddleray.services.exporter.serving.spec import ServedModel, validate_models

logger = logging.getLogger(__name__)
_POLL_S = 0.25
_APP_STATES = {"RUNNING": "READY", "DEPLOYING": "DEPLOYING", "DEPLOY_FAILED": "FAILED", "UNHEALTHY": "UNHEALTHY",
               "DELETING": "DELETING", "NOT_STARTED": "DEPLOYING"}


@dataclass
class VersionStatus:
    version: str
    # DEPLOYING, READY, UNHEALTHY, FAILED or DELETING.
    state: str
    running_replicas: int = 0
    target_replicas: int = 0
    # Whether the ingress routes requests to this version, and with which traffic weight.
    serving: bool = False
    weight: float = 0.0
    message: str = ""


@dataclass
class ServedModelStatus:
    serving_name: str
    versions: dict[str, VersionStatus] = field(default_factory=dict)


class ServingController:
    def __init__(
        self,
        grpc_port: int = 9000,
        http_host: str = "127.0.0.1",
        http_port: int = 8000,
        ingress_replicas: int = 1,
        ingress_max_ongoing_requests: int = 256,
        request_timeout_s: float = 30.0,
        deploy_timeout_s: float = 180.0,
        direct_host: str = "127.0.0.1",
    ) -> None:
        """direct_host: the address models' own v2 endpoints bind (ServedModel.direct_port)."""
        self.grpc_port = grpc_port
        self.http_host = http_host
        self.http_port = http_port
        self._ingress_replicas = ingress_replicas
        self._ingress_max_ongoing = ingress_max_ongoing_requests
        self._request_timeout_s = request_timeout_s
        self._deploy_timeout_s = deploy_timeout_s
        self.direct_host = direct_host
        self._lock = asyncio.Lock()
        # Why versions of the last apply are not served, by (serving name, version).
        self._failures: dict[tuple[str, str], str] = {}

    async def start(self) -> None:
        """Starts Serve with the gRPC proxy and the ingress app; attaches when they already run."""
        async with self._lock:
            await asyncio.to_thread(self._start)
            await self._wait_apps([sc.INGRESS_APP])

    def _start(self) -> None:
        from ray import serve

        serve.start(
            proxy_location="HeadOnly",
            http_options={"host": self.http_host, "port": self.http_port},
            grpc_options={"port": self.grpc_port, "grpc_servicer_functions": [SERVICER]},
        )
        details = self._details()
        # Serve keeps the proxy options it was first started with: attached to a Serve that an
        # earlier exporter started on another port, the endpoint is that port, not ours.
        serving_port = int((details.get("grpc_options") or {}).get("port") or self.grpc_port)
        if serving_port != self.grpc_port:
            logger.warning("Ray Serve on this cluster serves gRPC on port %d (started so before this exporter, "
                           "configured for %d): deployments report port %d", serving_port, self.grpc_port, serving_port)
            self.grpc_port = serving_port
        apps = details.get("applications") or {}
        if sc.INGRESS_APP in apps:
            return
        self._deploy_sync(_model_apps(apps), {}, 0)

    async def stop(self, shutdown_serve: bool = False) -> None:
        """Detaches; Serve keeps serving (a restarted exporter attaches again) unless shutdown_serve."""
        if shutdown_serve:
            from ray import serve

            async with self._lock:
                await asyncio.to_thread(serve.shutdown)

    async def apply(self, models: list[ServedModel]) -> None:
        """Makes `models` the whole served state; returns when the ingress routes by it.

        InvalidArgument / FailedPrecondition (bad spec, missing artifact or backend) before
        anything changes; versions that fail to start are reported by status(), not raised.
        """
        validate_models(models)
        async with self._lock:
            artifacts = await asyncio.to_thread(_load_artifacts, models)
            desired_apps: dict[str, dict[str, Any]] = {}
            desired_table: dict[str, dict[str, Any]] = {}
            for model in models:
                for version in model.versions:
                    app = sc.model_app(model, version, artifacts[model.serving_name, version.version], self.direct_host)
                    desired_apps[app["name"]] = app
                    desired_table.setdefault(model.serving_name, {})[version.version] = sc.route_entry(
                        version, artifacts[model.serving_name, version.version], app["name"]
                    )
            details = (await asyncio.to_thread(self._details)).get("applications") or {}
            current_apps = _model_apps(details)
            running = {n for n, a in details.items() if _value(a.get("status")) == "RUNNING"}
            table, generation = sc.ingress_table((details.get(sc.INGRESS_APP) or {}).get("deployed_app_config"))

            # 1. New and replaced versions start beside the running ones; routing unchanged.
            staged = {**current_apps, **desired_apps}
            await asyncio.to_thread(self._deploy_sync, staged, table, generation)
            results = await self._wait_apps(list(desired_apps), raise_on_timeout=False)

            # 2. Route to what is ready; a version that failed keeps its previous app if it had one.
            new_table, failures = _routable(desired_table, results, table, {n for n in current_apps if n in running})
            await asyncio.to_thread(self._deploy_sync, staged, new_table, generation + 1)
            await self._wait_generation(generation + 1)
            # Replicas with their own endpoint route by the same table (the new ones listen once
            # it routes to them): wait for them too.
            answering = {n: a for n, a in staged.items() if n in running or results.get(n) == ""}
            await self._wait_model_tables(answering, generation + 1)
            generation += 1
            referenced = {e["app"] for versions in new_table.values() for e in versions.values()}

            # 2b. Endpoints of replicas nothing routes to any more close now, while the ones that
            # take their clients are known to listen: their clients reconnect to those, and none
            # is answered by a table the removed app no longer receives.
            if any(n not in referenced and (a.get("args") or {}).get("direct_port") for n, a in answering.items()):
                generation += 1
                await asyncio.to_thread(self._deploy_sync, staged, new_table, generation, True)
                await self._wait_generation(generation)
                await self._wait_model_tables(answering, generation)

            # 3. Apps nothing routes to any more drain and go.
            final = {n: a for n, a in staged.items() if n in desired_apps or n in referenced}
            if final.keys() != staged.keys():
                await asyncio.to_thread(self._deploy_sync, final, new_table, generation, True)
            self._failures = failures

    async def status(self) -> dict[str, ServedModelStatus]:
        """Live state per serving name and version, from Serve."""
        details = (await asyncio.to_thread(self._details)).get("applications") or {}
        table, _ = sc.ingress_table((details.get(sc.INGRESS_APP) or {}).get("deployed_app_config"))
        found: dict[str, ServedModelStatus] = {}
        chosen: dict[tuple[str, str], tuple[bool, float]] = {}
        for name, app in details.items():
            if not name.startswith(sc.MODEL_APP_PREFIX):
                continue
            args = (app.get("deployed_app_config") or {}).get("args") or {}
            model, version = str(args.get("model", "")), str(args.get("version", ""))
            route = (table.get(model) or {}).get(version)
            serving = bool(route and route["app"] == name)
            # During a replacement two apps serve one version: report the routed one.
            rank = (serving, float(app.get("last_deployed_time_s") or 0.0))
            if chosen.get((model, version), (False, -1.0)) >= rank:
                continue
            chosen[model, version] = rank
            deployment = (app.get("deployments") or {}).get(sc.MODEL_DEPLOYMENT) or {}
            replicas = deployment.get("replicas") or []
            found.setdefault(model, ServedModelStatus(model)).versions[version] = VersionStatus(
                version=version,
                state=_APP_STATES.get(_value(app.get("status")), _value(app.get("status"))),
                running_replicas=sum(1 for r in replicas if r.get("state") == "RUNNING"),
                target_replicas=int(deployment.get("target_num_replicas") or 0),
                serving=serving,
                weight=float(route["weight"]) if route is not None and serving else 0.0,
                message=self._failures.get((model, version)) or str(app.get("message") or deployment.get("message") or ""),
            )
        return found

    def _details(self) -> dict[str, Any]:
        from ray import serve

        return serve.context._get_global_client().get_serve_details()

    def _deploy_sync(self, apps: dict[str, dict[str, Any]], table: dict[str, Any], generation: int,
                     drain_unrouted: bool = False) -> None:
        from ray import serve
        from ray.serve.schema import ServeDeploySchema

        ingress = sc.ingress_app(
            table, generation, self._ingress_replicas, self._ingress_max_ongoing, self._request_timeout_s
        )
        # Validated before it reaches the controller: a config it rejects later takes apps down.
        models = [sc.with_model_table(a, table, generation, self._request_timeout_s, drain_unrouted) for a in apps.values()]
        schema = ServeDeploySchema.model_validate(sc.deploy_config([*models, ingress]))
        serve.context._get_global_client().deploy_apps(schema)

    async def _wait_apps(self, names: list[str], raise_on_timeout: bool = True) -> dict[str, str]:
        """'' per app once RUNNING, else why it is not (DEPLOY_FAILED, or not ready in time)."""
        from ray import serve

        deadline = time.monotonic() + self._deploy_timeout_s
        results: dict[str, str] = {}
        while True:
            apps = (await asyncio.to_thread(serve.status)).applications
            for name in names:
                app = apps.get(name)
                if app is not None and _value(app.status) == "RUNNING":
                    results[name] = ""
                elif app is not None and _value(app.status) == "DEPLOY_FAILED":
                    results[name] = f"failed to start: {app.message[:500]}"
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

    async def _wait_generation(self, generation: int) -> None:
        """Until every ingress replica answers with this routing table's generation."""
        await wait_for_generation(sc.INGRESS_APP, None, self._ingress_replicas, generation, self._deploy_timeout_s,
                                  "the inference ingress")

    async def _wait_model_tables(self, apps: dict[str, dict[str, Any]], generation: int) -> None:
        for name, app in apps.items():
            if (app.get("args") or {}).get("direct_port"):
                await wait_for_generation(name, sc.MODEL_DEPLOYMENT, _max_replicas(app), generation,
                                          self._deploy_timeout_s, f"model app {name}")


def _model_apps(details: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Deployed configs of the model apps, by name; apps being deleted have none and are left out."""
    return {
        name: app["deployed_app_config"]
        for name, app in details.items()
        if name.startswith(sc.MODEL_APP_PREFIX) and app.get("deployed_app_config") and _value(app.get("status")) != "DELETING"
    }


def _max_replicas(app: dict[str, Any]) -> int:
    deployment: dict[str, Any] = next((d for d in app.get("deployments") or [] if d.get("name") == sc.MODEL_DEPLOYMENT), {})
    scaling = deployment.get("autoscaling_config") or {}
    return max(int(scaling.get("max_replicas") or deployment.get("num_replicas") or 1), 1)


def _value(status: Any) -> str:
    """Serve's status enums (str subclasses) as their plain value."""
    return str(getattr(status, "value", status))


def _load_artifacts(models: list[ServedModel]):
    artifacts = {}
    for i, model in enumerate(models):
        for j, version in enumerate(model.versions):
            artifact = load_artifact(version.artifact_dir)
            if not artifact.has_backend(version.backend):
                raise FailedPrecondition(
                    f"models[{i}].versions[{j}].backend: {version.backend} needs an onnx artifact, and {artifact.root} has none"
                )
            artifacts[model.serving_name, version.version] = artifact
    return artifacts


def _routable(
    desired: dict[str, dict[str, Any]], results: dict[str, str], current: dict[str, Any], running: set[str]
) -> tuple[dict[str, Any], dict[tuple[str, str], str]]:
    table: dict[str, Any] = {}
    failures: dict[tuple[str, str], str] = {}
    for model, versions in desired.items():
        routed = {}
        for version, entry in versions.items():
            if results.get(entry["app"]) == "":
                routed[version] = entry
                continue
            failures[model, version] = results.get(entry["app"]) or "not started"
            previous = (current.get(model) or {}).get(version)
            if previous and previous["app"] in running:
                routed[version] = {**previous, "weight": entry["weight"]}
        if not any(e["weight"] > 0 for e in routed.values()) and model in current:
            # Nothing new could take the traffic: keep serving what served before.
            routed = current[model]
        if routed:
            table[model] = routed
    return table, failures

