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
- defer_serialization_addons: in a Ray worker process, Ray registers its custom serializers
  for pyarrow, pydantic and starlette objects (ray.util.serialization_addons, run when the
  process first (de)serializes anything) only once one of those modules is imported. Ray's
  addons import all three: 0.12 core-s and 46 MB of every training worker measured here, for
  a function that may use none of them (bench concurrency).
All are imported when called: importing this module never touches Ray's internals.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import threading
from collections.abc import Callable
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


# The modules whose classes Ray's serialization addons give custom serializers.
SERIALIZATION_ADDON_MODULES = ("pyarrow", "pydantic", "starlette")


def defer_serialization_addons() -> bool:
    """In a Ray worker process (not a driver): Ray's serialization addons run once one of their
    modules is imported (or is already), instead of importing them all at the process's first
    (de)serialization. Whether this process now defers them.

    The addons fill cloudpickle's process-wide dispatch table, which matters only when this
    process pickles an object of one of those classes, and none can exist before its module is
    imported: registering right after that import keeps Ray's behaviour exactly."""
    from ray._private import worker
    from ray.util import serialization_addons

    if worker.global_worker.mode != worker.WORKER_MODE:
        return False
    if getattr(serialization_addons.apply, "deferred", False):
        return True
    real_apply = serialization_addons.apply
    contexts: list[Any] = []
    lock = threading.Lock()

    def apply_now() -> None:
        with lock:
            if not contexts or getattr(apply_now, "done", False):
                return
            apply_now.done = True  # type: ignore[attr-defined]
        real_apply(contexts[0])

    def apply_once_imported(context: Any) -> None:
        contexts.append(context)
        if any(name in sys.modules for name in SERIALIZATION_ADDON_MODULES):
            apply_now()

    apply_once_imported.deferred = True  # type: ignore[attr-defined]
    serialization_addons.apply = apply_once_imported
    sys.meta_path.insert(0, _AfterImport(frozenset(SERIALIZATION_ADDON_MODULES), apply_now))
    return True


class _AfterImport:
    """A meta-path finder that finds nothing itself: it has `then()` run right after any of
    `names` (top-level modules) is executed by its own loader."""

    def __init__(self, names: frozenset[str], then: Callable[[], None]) -> None:
        self._names, self._then = names, then
        self._finding = threading.local()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self._names or getattr(self._finding, "on", False):
            return None
        self._finding.on = True  # the other finders find it
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._finding.on = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then(module: Any) -> None:
            exec_module(module)
            self._then()

        spec.loader.exec_module = exec_then  # type: ignore[method-assign]  # this spec's own loader object: nothing else shares it
        return spec
