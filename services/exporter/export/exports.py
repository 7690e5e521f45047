"""Runs in: the exporter process.

ExportManager: ExportModel as a long-running operation, and the sweep that ends lost exports.

ExportModel validates the request, resolves its source, records the version in EXPORTING and
returns; a background task on this exporter runs the export on the cluster (ray_exports.py)
and moves the version to VALIDATING, then READY, VALIDATION_FAILED or FAILED. The version
names its owner (this replica); every replica keeps a lease (a Redis key with a TTL) while it
lives, and a sweep on every replica fails the versions whose owner's lease is gone, so an
exporter killed mid-export leaves no version stuck in EXPORTING. When the Ray cluster is lost
(a head restart: the export task ended with it), cluster_lost() fails this replica's exports
in flight with WORKER_LOST and the connection's reason; export again once it is back.

Tenants (common.identity): the version joins its model's tenant, which a new model takes from
the caller's credential (an admin may name another). A job source must be the caller's to
see; a checkpoint_uri carries no tenant, so only admins may export one.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from google.protobuf import struct_pb2

from paddleray.common.v1 import common_pb2
from paddleray.exporter.v1 import exporter_service_pb2 as es
from paddleray.exporter.v1 import model_pb2
from paddleray.services.common import errors, idempotency, identity, names, packages, storage_paths
from paddleray.services.common.identity import Identity
from paddleray.services.exporter.export import sources
from paddleray.services.exporter.export.export_spec import ExportSpec, check_builder, export_spec
from paddleray.services.exporter.export.task.export_records import Exported, ExportRequest, Failed, Validated
from paddleray.services.exporter.registry import convert
from paddleray.services.exporter.store.registry_store import (
    TERMINAL_STATES,
    OtherTenantsModel,
    RegistryStore,
    VersionRecord,
)

log = logging.getLogger(__name__)
S = model_pb2.ModelVersionState
K = common_pb2.FailureKind
_TRACEBACK_BYTES = 8 * 1024


def artifact_dir(storage_root: str | Path, model_id: str, number: int) -> Path | str:
    """The version's directory: a path on a directory root, a URI on an object-store root."""
    return storage_paths.model_version_dir(storage_root, model_id, number)


class ExportManager:
    def __init__(
        self,
        store: RegistryStore,
        jobs: sources.SchedulerJobs,
        runner,
        storage_root: str | Path,
        allowlist: Sequence[str],
        owner: str,
        owner_lease_s: float = 10.0,
        export_timeout_s: float = 900.0,
        on_change: Callable[[], None] | None = None,
        cluster_connected: Callable[[], bool] = lambda: True,
    ) -> None:
        self.store = store
        self.jobs = jobs
        self.runner = runner
        self.storage_root = os.fspath(storage_root)  # a path or an s3:// URI (common.storage)
        self.allowlist = list(allowlist)
        self.owner = owner
        self.owner_lease_s = owner_lease_s
        self.export_timeout_s = export_timeout_s
        self.on_change = on_change or (lambda: None)
        self.cluster_connected = cluster_connected
        self._tasks: dict[str, asyncio.Task] = {}
        self._records: dict[str, VersionRecord] = {}

    # -- ExportModel ---------------------------------------------------------------------

    async def export(self, caller: Identity, request: es.ExportModelRequest) -> model_pb2.ModelVersion:
        identity.require_write(caller, "ExportModel")
        if request.WhichOneof("source") == "checkpoint_uri" and not caller.is_admin:
            # Before the path is looked at: a member learns nothing of the file system.
            raise errors.PermissionDenied("checkpoint_uri: a checkpoint carries no tenant, so only an admin credential "
                                          "may export one; export from the job instead")
        spec = export_spec(request, self.storage_root)
        tenant = identity.tenant_for_write(caller, request.tenant, "tenant")
        # What a repeated request_id must repeat: the request as sent, in the tenant it resolved to.
        fingerprint = idempotency.of_request(request, tenant=tenant)
        if spec.request_id:
            first = await self.store.version_of_request(spec.request_id)
            if first is not None:
                return _own(caller, first, fingerprint)
        # Checked again by the script that writes the version; here so that a model of another
        # tenant is refused before the source is read.
        existing = await self.store.get_model(spec.model_id)
        if existing is not None and existing.model.tenant != tenant and not (caller.is_admin and not request.tenant):
            raise _other_tenants_model(caller, request.parent, existing.model.tenant)
        if not self.cluster_connected():
            # Checked before anything is recorded: Ray would otherwise start a local cluster of its own.
            raise errors.Unavailable("the exporter is not connected to its Ray cluster yet; retry")
        source = await self._source(caller, spec)
        builder = spec.builder or _default_builder(source.entrypoint)
        given, field = spec.runtime_env is not None, "runtime_env.working_dir"
        environment, package_files = await asyncio.to_thread(
            resolve_environment, spec.runtime_env if spec.runtime_env is not None else source.runtime_env,
            self.storage_root, field if given else f"job: {source.job}'s spec.runtime_env.working_dir")
        builder_from_package = check_builder(builder, self.allowlist, package_files)
        config = spec.config if spec.config is not None else source.config
        now = time.time_ns()
        model = model_pb2.Model(name=names.MODEL.format(model=spec.model_id), display_name=spec.display_name, labels=spec.labels)
        model.create_time.FromNanoseconds(now)
        model.update_time.FromNanoseconds(now)
        version = model_pb2.ModelVersion(
            source_job=source.job, source_checkpoint=source.checkpoint, source_job_metrics=source.job_metrics,
            model_builder=builder, inputs=[convert.tensor_spec(t) for t in spec.inputs],
            state=S.MODEL_VERSION_STATE_EXPORTING,
        )
        struct = struct_pb2.Struct()
        struct.update(config)
        version.model_config.CopyFrom(struct)
        version.create_time.FromNanoseconds(now)
        version.update_time.FromNanoseconds(now)
        await self.store.renew_owner(self.owner, int(self.owner_lease_s * 1000))
        try:
            created, record = await self.store.create_version(
                model, version, self.owner, spec.request_id, tenant,
                adopt_tenant=caller.is_admin and not request.tenant, fingerprint=fingerprint)
        except OtherTenantsModel as exc:
            raise _other_tenants_model(caller, request.parent, exc.tenant) from None
        if not created:
            return _own(caller, record, fingerprint)
        task_request = self._task_request(spec, record, builder, builder_from_package, config, source, environment)
        task = asyncio.create_task(self._run(record, task_request, environment))
        self._tasks[record.version.name] = task
        self._records[record.version.name] = record
        task.add_done_callback(functools.partial(self._forget, record.version.name))
        return record.version

    def _forget(self, name: str, _task: asyncio.Task) -> None:
        self._tasks.pop(name, None)
        self._records.pop(name, None)

    async def cluster_lost(self, reason: str) -> None:
        """Ends the exports in flight FAILED (WORKER_LOST): their tasks ended with the cluster.
        Calls no Ray (the runner cancels nothing once the connection says it is lost)."""
        running = [(self._records[name], task) for name, task in self._tasks.items() if name in self._records]
        for record, _ in running:
            await self._write(record, failing(f"{reason}; the export task ended with it; export again",
                                              K.FAILURE_KIND_WORKER_LOST))
        for _, task in running:
            task.cancel()
        await asyncio.gather(*(task for _, task in running), return_exceptions=True)

    async def _source(self, caller: Identity, spec: ExportSpec) -> sources.Source:
        if spec.job:
            job = await self.jobs.get(spec.job)
            if not identity.visible(caller, job.tenant):
                raise errors.NotFound(f"job: {spec.job} does not exist")
            return sources.from_job(job)
        return sources.from_checkpoint(spec.checkpoint_dir)

    def _task_request(self, spec: ExportSpec, record: VersionRecord, builder: str, builder_from_package: bool,
                      config: dict[str, Any], source: sources.Source, environment: dict[str, Any]) -> ExportRequest:
        return ExportRequest(
            checkpoint_dir=source.checkpoint.uri, builder=builder, builder_from_package=builder_from_package,
            in_working_dir=bool(environment.get("working_dir")), config=config, inputs=spec.inputs,
            version_dir=str(artifact_dir(self.storage_root, record.model_id, record.number)),
            model=names.MODEL.format(model=record.model_id), version=record.version.name, formats=spec.formats,
            validation=spec.validation, tenant=record.version.tenant,
        )

    # -- the export task ---------------------------------------------------------------------

    async def _run(self, record: VersionRecord, request: ExportRequest, environment: dict[str, Any]) -> None:
        name = record.version.name
        try:
            async with asyncio.timeout(self.export_timeout_s):
                async for phase in self.runner.run(request, environment):
                    if isinstance(phase, Failed):
                        log.warning("export of %s failed: %s\n%s", name, phase.reason, phase.traceback)
                        await self._write(record, failing(phase.reason, K.FAILURE_KIND_USER_CODE, phase.traceback))
                    elif isinstance(phase, Exported):
                        await self._write(record, functools.partial(convert.apply_exported, exported=phase))
                    elif isinstance(phase, Validated):
                        await self._write(record, functools.partial(convert.apply_validation, validation=phase))
                    else:
                        raise TypeError(f"the export task yielded {type(phase).__name__}, not an export phase")
        except TimeoutError:
            await self._write(record, failing(f"the export took longer than {self.export_timeout_s:g}s",
                                              K.FAILURE_KIND_TIMEOUT))
        except asyncio.CancelledError:
            await asyncio.shield(self._write(record, failing("the exporter shut down during the export; export again",
                                                             K.FAILURE_KIND_STOPPED)))
            raise
        except Exception as exc:  # noqa: BLE001 - a lost worker, node or cluster ends the export
            log.exception("export of %s failed", name)
            await self._write(record, failing(f"the export task failed: {type(exc).__name__}: {exc}",
                                              K.FAILURE_KIND_WORKER_LOST))
        finally:
            current = await self.store.get_version(record.model_id, record.number)
            if current is not None and current.version.state not in TERMINAL_STATES:
                await self._write(record, failing("the export task ended without a result", K.FAILURE_KIND_TRAINER_ERROR))

    async def _write(self, record: VersionRecord, change: Callable[[model_pb2.ModelVersion], None]) -> None:
        """Applies `change` to the stored version (re-read on a concurrent write) unless it
        ended or was deleted meanwhile."""
        for _ in range(10):
            current = await self.store.get_version(record.model_id, record.number)
            if current is None or current.version.state in TERMINAL_STATES:
                return
            version = model_pb2.ModelVersion()
            version.CopyFrom(current.version)
            change(version)
            version.update_time.FromNanoseconds(time.time_ns())
            if await self.store.update_version(current, version) is not None:
                self.on_change()
                return
        log.error("could not write %s: it kept changing", record.version.name)

    # -- lost exports ------------------------------------------------------------------------

    async def sweep(self) -> int:
        """Renews this replica's lease and fails the exports whose owner is gone; returns how many."""
        await self.store.renew_owner(self.owner, int(self.owner_lease_s * 1000))
        failed = 0
        for model_id, number in await self.store.active_exports():
            record = await self.store.get_version(model_id, number)
            if record is None or record.owner == self.owner or await self.store.owner_alive(record.owner):
                continue
            await self._write(record, failing(
                f"the exporter running this export ({record.owner}) went away before it finished; export again",
                K.FAILURE_KIND_WORKER_LOST))
            failed += 1
        return failed

    async def run_sweeper(self, interval_s: float) -> None:
        while True:
            try:
                swept = await self.sweep()
                if swept:
                    log.info("failed %d exports whose exporter went away", swept)
            except Exception:  # noqa: BLE001 - Redis down: the next pass retries
                log.warning("export sweep failed", exc_info=True)
            await asyncio.sleep(interval_s)

    async def shutdown(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.store.release_owner(self.owner)


def _other_tenants_model(caller: Identity, parent: str, tenant: str) -> errors.DomainError:
    if identity.visible(caller, tenant):  # an admin naming another tenant than the model's
        return errors.InvalidArgument("tenant", f"{parent} is tenant {tenant!r}'s: its versions are that tenant's")
    # Any answer but success says that the id exists; this one says nothing more.
    return errors.NotFound(f"parent: {parent} cannot be used: model ids are one namespace across tenants and this "
                           "one is taken; choose another")


def _own(caller: Identity, first: VersionRecord, fingerprint: str) -> model_pb2.ModelVersion:
    """The version a repeated request_id created, if the request repeats the first one and that
    version is the caller's tenant's: otherwise the key is taken, and nothing of it is shown."""
    if not identity.visible(caller, first.version.tenant):
        raise idempotency.reused()
    idempotency.check_repeat(first.request_fp, fingerprint)
    return first.version


def resolve_environment(environment: dict[str, Any], storage_root: str | Path,
                        field: str) -> tuple[dict[str, Any], tuple[str, ...] | None]:
    """The export task's runtime env with a package URI resolved to the stored zip (as the
    trainer resolves a job's, packages.stored_package), and the package's files (None without one)."""
    working_dir = environment.get("working_dir", "")
    if not packages.is_package_uri(working_dir):
        return environment, None
    package = packages.stored_package(working_dir, storage_root, field, sys.modules)
    return {**environment, "working_dir": str(package.zip_path)}, package.files


def _default_builder(entrypoint: str) -> str:
    if not entrypoint:
        raise errors.InvalidArgument("model_builder", "is required: the source names no job entrypoint to take it from")
    return f"{entrypoint.partition(':')[0]}:build_model"


def failing(reason: str, kind: common_pb2.FailureKind,
            traceback: str = "") -> Callable[[model_pb2.ModelVersion], None]:
    """The change that ends a version FAILED with this reason."""

    def change(version: model_pb2.ModelVersion) -> None:
        version.state = S.MODEL_VERSION_STATE_FAILED
        version.state_reason = reason
        # Bounded as the trainer's tracebacks are: the innermost frames are the useful ones.
        version.failure.CopyFrom(common_pb2.Failure(kind=kind, message=reason, traceback=traceback[-_TRACEBACK_BYTES:]))

    return change
