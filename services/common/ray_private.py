"""The Ray private APIs the services need, in one place, so a Ray upgrade that moves them
fails one test (tests/unit/common/test_ray_private.py) instead of a run at dispatch time.

- available_resources_per_node: what each node has free; Ray's public API gives only the
  cluster's sum (ray.available_resources) and each node's total (ray.nodes), and the
  scheduler's admission and GetClusterResources need it per node.
- upload_working_dir_if_needed: ships a local working_dir to the GCS and names it by URI. Ray
  takes local directories only in a job's runtime env (ray.init); an actor's runtime env must
  name a URI, so the trainer packages the directory the way ray.init would.
- disable_auto_connect: turns off Ray's auto-init hook (the switch behind
  RAY_ENABLE_AUTO_CONNECT=0, which Ray reads once at import, too early for a service to
  set it), so a Ray API used before ray.init fails instead of attaching to any cluster.
- gcs_client: the connected driver's GCS client, whose key-value calls take a timeout
  (ray.experimental.internal_kv's do not), for the liveness probe of ray_connection.py.
- serve_controller_running: whether the cluster runs Serve's controller (its actor's name and
  namespace are Serve-private constants).
- serve_details / serve_deploy: Serve's whole state (every app's deployed config and replicas)
  and the declarative multi-app deploy, through Serve's controller client. They are what
  `serve config`/`serve status` and `serve deploy` do, but Serve exposes them publicly only
  through the dashboard's REST API (GET/PUT /api/serve/applications/, whose handler calls this
  same `deploy_apps`): the exporter, a Ray driver already, would need the dashboard running and
  its address besides. serve.status() (public) lacks the deployed configs and replica ids.
- serve_grpc_server_class: the gRPC server class of Serve's replicas, whose reuse-port option
  the replicas correct (exporter/serving/replica/exclusive_ports.py says why).
- serve_passthrough_service: has Serve's gRPC server answer a service itself rather than route
  it to the replica (how Serve serves reflection v1alpha; serving/replica/grpc_services.py adds v1 so).
- forget_serve_client: drops the Serve client this process cached (ray_connection.py says why).
All are imported when called: importing this module never touches Ray's internals.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def available_resources_per_node() -> dict[str, dict[str, float]]:
    """Node id -> its unreserved resources (a blocking call to the GCS)."""
    from ray._private.state import available_resources_per_node as per_node

    return per_node()


def upload_working_dir(runtime_env: dict[str, Any]) -> dict[str, Any]:
    """runtime_env with its local working_dir uploaded (content-addressed, once per content)
    and replaced by the package's URI."""
    from ray._private.runtime_env.working_dir import upload_working_dir_if_needed

    return upload_working_dir_if_needed(dict(runtime_env), include_gitignore=True, logger=log)


def disable_auto_connect() -> None:
    from ray._private import auto_init_hook

    auto_init_hook.enable_auto_connect = False


def gcs_client() -> Any:
    """The GCS client of this process's Ray connection (ray.init must have run)."""
    from ray._private import worker

    driver: Any = worker.global_worker
    return driver.gcs_client


def serve_controller_running() -> bool:
    """Whether the connected cluster runs Ray Serve's controller actor (asked of the cluster: Serve's
    cached client in this process may be a previous cluster's)."""
    import ray
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    try:
        ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    except ValueError:
        return False
    return True


def serve_details() -> dict[str, Any]:
    """Serve's instance details (ServeInstanceDetails as a dict); Serve must be running."""
    from ray.serve import context

    return context._get_global_client().get_serve_details()


def serve_deploy(schema: Any) -> None:
    """Applies a validated ServeDeploySchema: the whole desired set of applications."""
    from ray.serve import context

    context._get_global_client().deploy_apps(schema)


def forget_serve_client() -> None:
    """Drops the cached Serve controller client, if Serve was ever imported here."""
    import sys

    context = sys.modules.get("ray.serve.context")  # Serve never imported: nothing cached
    if context is not None:
        context._set_global_client(None)


def serve_grpc_server_class() -> Any:
    """Serve's gRPCGenericServer (the replicas' direct-ingress gRPC server)."""
    from ray.serve._private.grpc_util import gRPCGenericServer

    return gRPCGenericServer


def serve_passthrough_service(server: Any, service_name: str) -> None:
    """Has Serve's gRPC server answer `service_name` itself instead of routing its methods to the
    replica (gRPCGenericServer.add_passthrough_service, how Serve serves reflection)."""
    server.add_passthrough_service(service_name)
