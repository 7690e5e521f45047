"""What a StartRun caller other than an admin may name outside the run, and what it is shown.

The scheduler starts runs with its admin credential, once CreateJob has resolved init_from for
the job's own caller (scheduler/job_inputs.py). A member calling StartRun itself gets the same
rules: a checkpoint (init_from.checkpoint_uri, init_from.resolved_uri, resume_from) carries no
tenant, so only an admin may name one; a model version must be its tenant's (NOT_FOUND, as
for one not exported, otherwise); datasets and a local working_dir stay out of the services'
trees of the storage root (common.storage_paths). Paths the scheduler resolved are shown to
admins only. The Trainer applies both (check at StartRun, shown on every run it answers with).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from paddleray.common.v1 import common_pb2
from paddleray.services.common import errors, identity, names, storage_paths
from paddleray.services.common.identity import Identity
from paddleray.services.trainer.runs import RunRecord


def check(caller: Identity, spec: common_pb2.TrainingSpec, resume_from: common_pb2.Checkpoint | None,
          storage_root: str | Path) -> None:
    if caller.is_admin:
        return
    if resume_from is not None and resume_from.uri:
        raise errors.PermissionDenied("resume_from: a checkpoint carries no tenant, so only an admin credential "
                                      "(the scheduler's) may name one")
    init_from = spec.init_from
    source = init_from.WhichOneof("source")
    if init_from.resolved_uri or source == "checkpoint_uri":
        where = "spec.init_from.resolved_uri" if init_from.resolved_uri else "spec.init_from.checkpoint_uri"
        raise errors.PermissionDenied(f"{where}: a checkpoint carries no tenant, so only an admin credential (the "
                                      "scheduler's) may name one; create a job with init_from.job instead")
    if source == "model_version":
        where = "spec.init_from.model_version"
        ids = names.MODEL_VERSION.parse(init_from.model_version, where)
        tenant = storage_paths.version_tenant(storage_paths.model_version_dir(storage_root, ids["model"], ids["version"]))
        if tenant is None or not identity.visible(caller, tenant):
            raise errors.NotFound(f"{where}: {init_from.model_version} not found (no exported version of that name)")
    for i, dataset in enumerate(spec.datasets):
        storage_paths.check_member_path(dataset.uri, storage_root, f"spec.datasets[{i}].uri", caller)
    storage_paths.check_member_path(spec.runtime_env.working_dir, storage_root, "spec.runtime_env.working_dir", caller)


def shown(caller: Identity, record: RunRecord) -> RunRecord:
    """The run as the caller may see it: the record itself, or for a member a copy without
    init_from.resolved_uri (a path in the shared storage root)."""
    if not record.spec.init_from.resolved_uri or caller.is_admin:
        return record
    spec = common_pb2.TrainingSpec()
    spec.CopyFrom(record.spec)
    spec.init_from.ClearField("resolved_uri")
    return dataclasses.replace(record, spec=spec)
