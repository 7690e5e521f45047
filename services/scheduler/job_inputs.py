"""JobInputs: what a job names outside itself, checked and pinned at CreateJob.

- The entrypoint: under the allowlist, or a module file of the job's own package (the rule
  of paddleray.services.common.entrypoints; the trainer applies it again at StartRun).
- spec.runtime_env.working_dir naming a package: it must be stored. Packages are
  content-addressed and never rewritten, so every attempt runs the exact code submitted.
- spec.init_from: resolved once, here, to a directory stored in init_from.resolved_uri, so
  that retries start from the same weights even when the source job checkpoints again.

Errors name the field: INVALID_ARGUMENT for a malformed value, FAILED_PRECONDITION for a
well-formed reference to something that is not there (yet): a package not uploaded, a job
without a checkpoint, a model version not exported.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2
from paddleray.services.common import entrypoints, errors, names, packages
from paddleray.services.scheduler.packages import PackageStore
from paddleray.services.scheduler.store import JobStore

# What the exporter writes into every model version's directory.
_MODEL_MANIFEST = "manifest.json"


class JobInputs:
    def __init__(self, packages_store: PackageStore, jobs: JobStore, storage_root: str | Path,
                 allowlist: Sequence[str]) -> None:
        self.packages = packages_store
        self.jobs = jobs
        self.storage_root = Path(storage_root)
        self.allowlist = list(allowlist)

    async def prepare(self, spec: common_pb2.TrainingSpec, field: str) -> common_pb2.TrainingSpec:
        """The spec to store: checked, with init_from resolved (then a copy; `spec` is unchanged)."""
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
        if not spec.HasField("init_from"):
            return spec  # CreateJob's common case: no copy
        prepared = common_pb2.TrainingSpec()
        prepared.CopyFrom(spec)
        prepared.init_from.resolved_uri = await self._resolve(spec.init_from, f"{field}.init_from")
        return prepared

    async def _resolve(self, init_from: common_pb2.InitFrom, field: str) -> str:
        source = init_from.WhichOneof("source")
        if source == "checkpoint_uri":
            path = Path(init_from.checkpoint_uri)
            if not init_from.checkpoint_uri or not await asyncio.to_thread(path.is_dir):
                raise errors.FailedPrecondition(f"{field}.checkpoint_uri: {init_from.checkpoint_uri!r} is not a directory")
            return str(path)
        if source == "job":
            return await self._job_checkpoint(init_from.job, f"{field}.job")
        if source == "model_version":
            return await self._model_version(init_from.model_version, f"{field}.model_version")
        raise errors.InvalidArgument(field, "set one of checkpoint_uri, job or model_version")

    async def _job_checkpoint(self, name: str, field: str) -> str:
        record = await self.jobs.get(names.JOB.parse_one(name, field))
        if record is None:
            raise errors.FailedPrecondition(f"{field}: {name} does not exist")
        for checkpoint in [*await self._best(record.job), record.job.latest_checkpoint]:
            if not checkpoint.uri:
                continue
            if await asyncio.to_thread(Path(checkpoint.uri).is_dir):
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

    async def _model_version(self, name: str, field: str) -> str:
        ids = names.MODEL_VERSION.parse(name, field)
        path = self.storage_root / "models" / ids["model"] / "versions" / ids["version"]
        if not await asyncio.to_thread((path / _MODEL_MANIFEST).is_file):
            raise errors.FailedPrecondition(f"{field}: {name} has not been exported (no {path / _MODEL_MANIFEST})")
        return str(path)
