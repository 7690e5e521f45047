"""Runs in: the exporter process.

Every Redis key the exporter uses, built in one place (as services/scheduler/keys.py).

All keys share one prefix, so that the exporter can share a Redis with the scheduler and tests
can assert on exactly the keys a call wrote.
"""

from __future__ import annotations

PREFIX = "paddleray:exp:"


def installation() -> str:
    """String: this installation's id (one per Redis, shared by the exporter's replicas), the
    name it manages Ray Serve under (serving/control/ownership.py)."""
    return f"{PREFIX}installation"


def store_lost() -> str:
    """String (JSON: installation, reason, since): set while this store looks lost (a Redis that
    came back empty under running serving: store_guard.py); nothing is applied to Serve meanwhile."""
    return f"{PREFIX}store-lost"


def store_loss_confirmed() -> str:
    """String: an operator confirmed that the desired state in this store is meant (store_guard.py
    confirm); consumed by the next apply."""
    return f"{PREFIX}store-loss-confirmed"


def model(model_id: str) -> str:
    """Hash: proto (the Model without latest_version), gen (bumped by every write), latest
    (newest version number, the counter new versions take theirs from), member."""
    return f"{PREFIX}model:{model_id}"


def models_by_time() -> str:
    """Sorted set (all scores 0) of "<create_ms, 15 digits>:<model_id>": the ListModels order."""
    return f"{PREFIX}index:models"


def version(model_id: str, number: int) -> str:
    """Hash: proto (the ModelVersion), gen, state (ModelVersionState number), owner (exporter
    replica running its export while it is not terminal)."""
    return f"{version_prefix(model_id)}{number}"


def version_prefix(model_id: str) -> str:
    """For Lua scripts that build a version's key from the number they allocate."""
    return f"{PREFIX}version:{model_id}:"


def version_changes(model_id: str, number: int) -> str:
    """Stream of a version's writes (field "v": the ModelVersion proto), capped: WatchModelVersion."""
    return f"{version_changes_prefix(model_id)}{number}"


def version_changes_prefix(model_id: str) -> str:
    return f"{PREFIX}version-changes:{model_id}:"


def versions(model_id: str) -> str:
    """Sorted set of a model's version numbers, scored by the number."""
    return f"{PREFIX}versions:{model_id}"


def active_exports() -> str:
    """Set of "<model_id>/<n>" whose export has not ended (EXPORTING or VALIDATING)."""
    return f"{PREFIX}active-exports"


def owner_lease(owner: str) -> str:
    """String with a TTL: present while the exporter replica `owner` is alive."""
    return f"{PREFIX}owner:{owner}"


def export_request(request_id: str) -> str:
    """String: "<model_id>/<n>" created by this ExportModel request_id (expires after 24 hours)."""
    return f"{PREFIX}export-request:{request_id}"


def version_deployments(model_id: str, number: int) -> str:
    """Set of deployment ids whose traffic names the version (it cannot be deleted meanwhile)."""
    return f"{version_deployments_prefix(model_id)}{number}"


def version_deployments_prefix(model_id: str) -> str:
    return f"{PREFIX}version-deployments:{model_id}:"


def deployment(deployment_id: str) -> str:
    """Hash. The user's part, written by DeploymentManager only: proto (the spec), gen (its
    generation), member, serving_name, request_fp. The reconciler's part: status (the observed
    state), observed_gen, applied_gen (deployment_store.py)."""
    return f"{PREFIX}deployment:{deployment_id}"


def deployments_applied() -> str:
    """String: fingerprint of the served state the reconciler last applied to Serve (so that a
    restarted exporter does not apply it again)."""
    return f"{PREFIX}deployments-applied"


def deployment_prefix() -> str:
    """For Lua scripts that reach a deployment through a request key."""
    return f"{PREFIX}deployment:"


def deployments_by_time() -> str:
    """Sorted set (all scores 0) of "<create_ms>:<deployment_id>": the ListDeployments order."""
    return f"{PREFIX}index:deployments"


def serving_names() -> str:
    """Hash: serving name -> deployment id (serving names are unique)."""
    return f"{PREFIX}serving-names"


def deployment_request(request_id: str) -> str:
    """String: deployment id created by this CreateDeployment request_id (expires after 24 hours)."""
    return f"{PREFIX}deployment-request:{request_id}"

