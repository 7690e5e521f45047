"""Runs in: the exporter process.

Desired served models -> the Ray Serve declarative config (ServeDeploySchema as a dict).

One application per served model, named by its serving name, whose only deployment (`Model`,
model_app.py) is its ingress: Serve's HAProxy sends the model's requests straight to its
replicas (gRPC by the `application` metadata, which is the serving name; REST by the route
prefix /v2/models/<name>). One more app, the server app (SERVER_APP on /v2), answers the
server-level REST resources and NOT_FOUND for models nobody serves.

Why declarative (measured on Ray Serve 2.60 before the choice): a change that is only a
deployment's user_config or replica count reconfigures it in place (the same replica process,
`reconfigure` applied in 0.48 s, no request failed), while `serve.run` again or a change of an
app's args or actor options starts new replicas. So everything a rollout changes (versions, weights,
predictor options, batching) is the Model deployment's user_config, and only resources
(CPUs, GPUs, memory) or the GPU setup restart replicas.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from paddleray.services.exporter.serving.spec import MODEL_DEPLOYMENT, ServedModel

# Not a serving name (those start with a letter or digit), so never a model's app.
SERVER_APP = "_paddleray"
SERVER_ROUTE = "/v2"
_IMPORT = "paddleray.services.exporter.serving.replica.model_app:build"
# One access-log line per request in every replica log (5.5 MB per 20k requests).
_LOGGING = {"enable_access_log": False, "log_level": "WARNING"}


def route_prefix(serving_name: str) -> str:
    return f"/v2/models/{serving_name}"


def model_table(model: ServedModel, generation: int, timeout_s: float) -> dict[str, Any]:
    """The Model deployment's user_config: what its replicas load and how they route."""
    return {
        "generation": generation,
        "timeout_s": timeout_s,
        "predictor": dataclasses.asdict(model.predictor),
        "batching": dataclasses.asdict(model.batching),
        "versions": {v.version: {"artifact_dir": v.artifact_dir, "backend": v.backend, "weight": v.weight}
                     for v in model.versions},
    }


def model_app(model: ServedModel, generation: int, timeout_s: float) -> dict[str, Any]:
    actor_options: dict[str, Any] = {"num_cpus": model.num_cpus, "num_gpus": model.num_gpus}
    if model.memory:
        actor_options["memory"] = model.memory
    deployment: dict[str, Any] = {
        "name": MODEL_DEPLOYMENT,
        "ray_actor_options": actor_options,
        "max_ongoing_requests": model.max_ongoing_requests,
        "user_config": model_table(model, generation, timeout_s),
    }
    if model.autoscaling is None:
        deployment["num_replicas"] = model.num_replicas
    else:
        a = model.autoscaling
        deployment["autoscaling_config"] = {
            "min_replicas": a.min_replicas,
            "max_replicas": a.max_replicas,
            "initial_replicas": max(a.min_replicas, 1),
            "target_ongoing_requests": a.target_ongoing_requests,
        }
    return {
        "name": model.serving_name,
        "route_prefix": route_prefix(model.serving_name),
        "import_path": _IMPORT,
        # In the args (a change starts new replicas): the GPU setup happens before Paddle loads.
        "args": {"model": model.serving_name, "num_gpus": model.num_gpus},
        "deployments": [deployment],
        "logging_config": _LOGGING,
    }


def server_app(known: Sequence[str] = (), max_ongoing_requests: int = 1024) -> dict[str, Any]:
    """known: the names this installation serves. A call for one reaches the server app only while
    its own app does not answer (not deployed yet, or again after a Ray head restart): the
    server app says UNAVAILABLE for those, NOT_FOUND for names nobody serves."""
    return {
        "name": SERVER_APP,
        "route_prefix": SERVER_ROUTE,
        "import_path": _IMPORT,
        "args": {"model": ""},
        "deployments": [{
            "name": MODEL_DEPLOYMENT,
            "num_replicas": 1,
            "max_ongoing_requests": max_ongoing_requests,
            # It answers health and metadata only: no CPU reservation.
            "ray_actor_options": {"num_cpus": 0},
            "user_config": {"generation": 0, "versions": {}, "known": sorted(known)},
        }],
        "logging_config": _LOGGING,
    }


def deploy_config(apps: list[dict[str, Any]]) -> dict[str, Any]:
    return {"applications": sorted(apps, key=lambda a: a["name"])}


def deployed_table(app_config: dict[str, Any] | None) -> dict[str, Any]:
    """The user_config of a deployed app's Model deployment ({} when there is none)."""
    for deployment in (app_config or {}).get("deployments") or []:
        if deployment.get("name") == MODEL_DEPLOYMENT:
            return dict(deployment.get("user_config") or {})
    return {}


def without_generation(app: dict[str, Any]) -> dict[str, Any]:
    """The app config with its table's generation left out: what tells a change from none."""
    deployments = []
    for d in app.get("deployments") or []:
        config = {k: v for k, v in (d.get("user_config") or {}).items() if k != "generation"}
        deployments.append({**d, "user_config": config})
    return {**app, "deployments": deployments}
