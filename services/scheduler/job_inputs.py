"""JobInputs: what a job names outside itself, checked and pinned at CreateJob.

- The entrypoint: under the allowlist, or a module file of the job's own package (the rule
  of paddleray.services.common.entrypoints; the trainer applies it again at StartRun).
- spec.runtime_env.working_dir naming a package: it must be stored. Packages are
  content-addressed and never rewritten, so every attempt runs the exact code submitted.
- spec.init_from: resolved once, here, to a directory stored in init_from.resolved_uri, so
  that retries start from the same weights even when the source job checkpoints again. The
  source is read with the caller's rights, as GetJob reads: another tenant's job or model
  version is NOT_FOUND in the words of a missing one; a checkpoint_uri carries no tenant, so
  only an admin may name one, under the storage root (a member learns nothing of the file
  system from the answer: the role is checked before any path).
- spec.datasets[].uri and a local working_dir: a member may not name a path inside the
  services' trees of the storage root (common.storage_paths), where every tenant's
  checkpoints and models are. A local dataset must exist under the storage root, which the
  trainer and its Ray workers share with the scheduler: one that does not (a path on the
  client's machine, say a spec file's data/ folder) is refused here, naming the root, not
  accepted and then failed by the trainer at every StartRun.

Errors name the field: INVALID_ARGUMENT for a malformed value, NOT_FOUND for a job or model
version the caller cannot see (absent, or another tenant's), FAILED_PRECONDITION for a
well-formed reference to something that is not there (yet): a package not uploaded, a job
without a checkpoint, a checkpoint directory that is gone.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2
from paddleray.services.common import entrypoints, errors, identity, names, packages, storage_paths
from paddleray.services.common.identity import Identity
from paddleray.services.common.storage import Storage, is_uri
from paddleray.services.scheduler.packages import PackageStore
from paddleray.services.scheduler.store import JobStore


class JobInputs:
    def __init__(self, packages_store: PackageStore, jobs: JobStore, storage_root: str | Path,
                 allowlist: Sequence[str]) -> None:
        self.packages = packages_store
        self.jobs = jobs
        self.storage_root: Path | str = storage_root if is_uri(storage_root) else Path(storage_root)
        self.allowlist = list(allowlist)

    async def prepare(self, spec: common_pb2.TrainingSpec, field: str, *, caller: Identity) -> common_pb2.TrainingSpec:
        """The spec to store: checked, with init_from resolved (then a copy; `spec` is unchanged),
        with caller's rights: CreateJob's and CreateExperiment's caller, passed down by their
        servicers; a sweep's trials pass LOCAL (experiment_trials.py says why)."""
        files = None
        working_dir = spec.runtime_env.working_dir
        if packages.is_package_uri(working_dir):
            where = f"{field}.runtime_env.working_dir"
            digest = packages.digest_from_uri(working_dir, where)
            files = await self.packages.files(digest)
            if files is None:
                raise errors.FailedPrecondition(
                    f"{where}: package {working_dir} is not stored on this scheduler (upload it first)"
                )
            packages.check_no_shadowing(files, sys.modules, where)
            # Named by a new job (or trial): kept a whole retention period from now (package_gc.py).
            await asyncio.to_thread(self.packages.touch, digest)
        entrypoints.check_entrypoint(spec.entrypoint, self.allowlist, files, f"{field}.entrypoint")
        await asyncio.to_thread(self._check_local_paths, caller, spec, field)
        if not spec.HasField("init_from"):
            return spec  # CreateJob's common case: no copy
        prepared = common_pb2.TrainingSpec()
        prepared.CopyFrom(spec)
        prepared.init_from.resolved_uri = await self._resolve(caller, spec.init_from, f"{field}.init_from")
        return prepared

    def _check_local_paths(self, caller: Identity, spec: common_pb2.TrainingSpec, field: str) -> None:
        """Local paths the trainer will open for the job: datasets under the storage root and
        there, as the trainer checks them again at StartRun (common.storage_paths.local_dataset)."""
        for i, dataset in enumerate(spec.datasets):
            where = f"{field}.datasets[{i}].uri"
            storage_paths.check_member_path(dataset.uri, self.storage_root, where, caller)
            if dataset.uri and storage_paths.is_local(dataset.uri):
                storage_paths.local_dataset(dataset.uri, self.storage_root, where)
        storage_paths.check_member_path(spec.runtime_env.working_dir, self.storage_root,
                                        f"{field}.runtime_env.working_dir", caller)

    async def _resolve(self, caller: Identity, init_from: common_pb2.InitFrom, field: str) -> str:
        source = init_from.WhichOneof("source")
        if source == "checkpoint_uri":
            where = f"{field}.checkpoint_uri"
            if not caller.is_admin:
                raise errors.PermissionDenied(
                    f"{where}: a checkpoint carries no tenant, so only an admin credential may name one; "
                    "name the job (init_from.job) or the model version (init_from.model_version) instead"
                )
            path = storage_paths.confined(init_from.checkpoint_uri, self.storage_root, where)
            if not init_from.checkpoint_uri or not await asyncio.to_thread(_is_dir, path):
                raise errors.FailedPrecondition(f"{where}: {init_from.checkpoint_uri!r} is not a directory")
            return str(path)
        if source == "job":
            return await self._job_checkpoint(caller, init_from.job, f"{field}.job")
        if source == "model_version":
            return await self._model_version(caller, init_from.model_version, f"{field}.model_version")
        raise errors.InvalidArgument(field, "set one of checkpoint_uri, job or model_version")

    async def _job_checkpoint(self, caller: Identity, name: str, field: str) -> str:
        record = await self.jobs.get(names.JOB.parse_one(name, field))
        if record is None or not identity.visible(caller, record.job.tenant):
            raise errors.NotFound(f"{field}: {name} not found")
        for checkpoint in [*await self._best(record.job), record.job.latest_checkpoint]:
            if not checkpoint.uri:
                continue
            if await asyncio.to_thread(_is_dir, checkpoint.uri if is_uri(checkpoint.uri) else Path(checkpoint.uri)):
                return checkpoint.uri
        raise errors.FailedPrecondition(f"{field}: {name} has no checkpoint (yet)")

    async def _best(self, job: job_pb2.Job) -> list[common_pb2.Checkpoint]:
        """The job's checkpoints with its best_metric, best first (from its checkpoint events)."""
        policy = job.spec.checkpoint_policy
        if not policy.best_metric:
            return []
        job_id = job.name.removeprefix("jobs/")
        found: list[common_pb2.Checkpoint] = []
        after = 0
        while events := await self.jobs.events_after(job_id, after):
            after = events[-1].sequence
            found += [e.checkpoint for e in events if e.WhichOneof("payload") == "checkpoint"
                      and policy.best_metric in e.checkpoint.metrics]
        sign = 1 if policy.best_mode == common_pb2.METRIC_MODE_MIN else -1
        return sorted(found, key=lambda c: sign * c.metrics[policy.best_metric])

    async def _model_version(self, caller: Identity, name: str, field: str) -> str:
        ids = names.MODEL_VERSION.parse(name, field)
        path = storage_paths.model_version_dir(self.storage_root, ids["model"], ids["version"])
        tenant = await asyncio.to_thread(storage_paths.version_tenant, path)
        # Not exported (yet) or another tenant's: the same answer, which says nothing of the other.
        if tenant is None or not identity.visible(caller, tenant):
            raise errors.NotFound(f"{field}: {name} not found (no exported version of that name)")
        return str(path)


def _is_dir(location: Path | str) -> bool:
    """A directory on disk, or a non-empty prefix of an object store (its directories)."""
    return location.is_dir() if isinstance(location, Path) else bool(Storage.for_root(location).list_dir(""))
