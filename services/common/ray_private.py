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
