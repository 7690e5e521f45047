"""Desired served models -> the Ray Serve declarative config (ServeDeploySchema as a dict).

One application per model version, hidden from the proxies (route_prefix None), plus one
ingress application: the only one the gRPC proxy sees, so stock v2 clients need no
`application` metadata. Why this split (measured, SERVING_FACTS.md §6): `serve.run` of one
app restarts every deployment in it; a declarative config whose change is only a
deployment's user_config / replica count reconfigures in place, and a change of an app's
args rebuilds only that app. So the routing table is the ingress's user_config, and a
version's app name carries a hash of everything that needs a new replica (artifact,
backend, predictor, resources): replacing a version starts a new app beside the old one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from paddleray.services.exporter.serving.artifact import Artifact
from paddleray.services.exporter.serving.predictor import PLATFORMS
from paddleray.services.exporter.serving.spec import ServedModel, ServedVersion

INGRESS_APP = "paddleray-inference"
INGRESS_DEPLOYMENT = "InferenceIngress"
MODEL_DEPLOYMENT = "Model"
MODEL_APP_PREFIX = "pr-model-"
_MODEL_IMPORT = "paddleray.services.exporter.serving.model_app:build"
_INGRESS_IMPORT = "paddleray.services.exporter.serving.ingress:build"
# One access-log line per request in every proxy and replica log (5.5 MB per 20k requests).
_LOGGING = {"enable_access_log": False, "log_level": "WARNING"}


def model_app(model: ServedModel, version: ServedVersion, artifact: Artifact, direct_host: str = "127.0.0.1") -> dict[str, Any]:
    args: dict[str, Any] = {
        "artifact_dir": str(artifact.root),
        "backend": version.backend,
        "predictor": dataclasses.asdict(version.predictor),
        "num_gpus": version.num_gpus,
        "model": model.serving_name,
        "version": version.version,
    }
    if model.direct_port:
        # In the args, hence the app's name: moving the endpoint starts new replicas there.
        args.update(direct_host=direct_host, direct_port=model.direct_port)
    actor_options: dict[str, Any] = {"num_cpus": version.num_cpus, "num_gpus": version.num_gpus}
    if version.memory:
        actor_options["memory"] = version.memory
    digest = hashlib.sha256(json.dumps([args, actor_options], sort_keys=True).encode()).hexdigest()[:10]
    deployment: dict[str, Any] = {
        "name": MODEL_DEPLOYMENT,
        "ray_actor_options": actor_options,
        "max_ongoing_requests": version.max_ongoing_requests,
    }
    if version.autoscaling is None:
        deployment["num_replicas"] = version.num_replicas
    else:
        a = version.autoscaling
        deployment["autoscaling_config"] = {
            "min_replicas": a.min_replicas,
            "max_replicas": a.max_replicas,
            "initial_replicas": max(a.min_replicas, 1),
            "target_ongoing_requests": a.target_ongoing_requests,
        }
    return {
        "name": f"{MODEL_APP_PREFIX}{model.serving_name}-v{version.version}-{digest}",
        "route_prefix": None,
        "import_path": _MODEL_IMPORT,
        "args": args,
        "deployments": [deployment],
        "logging_config": _LOGGING,
    }


def route_entry(version: ServedVersion, artifact: Artifact, app_name: str) -> dict[str, Any]:
    """What the ingress needs to route to and check requests for one version."""
    return {
        "weight": version.weight,
        "app": app_name,
        "platform": PLATFORMS[version.backend],
        "signature": artifact.signature.to_dict(),
        # The ingress batches (model_app.py says why), so batching changes reconfigure it in place.
        "max_batch_size": version.batching.max_batch_size,
        "batch_wait_timeout_s": version.batching.batch_wait_timeout_s,
    }


def ingress_app(
    table: dict[str, Any], generation: int, num_replicas: int, max_ongoing_requests: int, timeout_s: float
) -> dict[str, Any]:
    """table: serving name -> version -> route_entry."""
    return {
        "name": INGRESS_APP,
        "route_prefix": "/",
        "import_path": _INGRESS_IMPORT,
        "args": {"timeout_s": timeout_s},
        "deployments": [
            {
                "name": INGRESS_DEPLOYMENT,
                "num_replicas": num_replicas,
                "max_ongoing_requests": max_ongoing_requests,
                # The ingress only routes; the model replicas hold the CPU reservations.
                "ray_actor_options": {"num_cpus": 0},
                "user_config": {"generation": generation, "models": table},
            }
        ],
        "logging_config": _LOGGING,
    }


def with_model_table(app: dict[str, Any], table: dict[str, Any], generation: int, timeout_s: float,
                     drain_unrouted: bool = False) -> dict[str, Any]:
    """A model app with a direct endpoint, given its model's routing table as user_config.

    The replicas answer on their own endpoint with the same table as the ingress, and a
    user_config change reconfigures them in place (no restart), as the ingress. A replica
    listens once the table routes its version to its app; with drain_unrouted, one the table
    no longer routes to closes its endpoint (controller.apply says when that is safe).
    """
    args = app.get("args") or {}
    if not args.get("direct_port"):
        return app
    config = {"generation": generation, "timeout_s": timeout_s, "versions": table.get(args["model"]) or {},
              "drain_unrouted": drain_unrouted}
    deployments = [{**d, "user_config": config} if d.get("name") == MODEL_DEPLOYMENT else d for d in app["deployments"]]
    return {**app, "deployments": deployments}


def deploy_config(apps: list[dict[str, Any]]) -> dict[str, Any]:
    return {"applications": sorted(apps, key=lambda a: a["name"])}


def ingress_table(app_config: dict[str, Any] | None) -> tuple[dict[str, Any], int]:
    """The routing table and generation inside a deployed ingress app config."""
    if not app_config:
        return {}, 0
    for deployment in app_config.get("deployments") or []:
        if deployment.get("name") == INGRESS_DEPLOYMENT:
            config = deployment.get("user_config") or {}
            return dict(config.get("models") or {}), int(config.get("generation") or 0)
    return {}, 0
