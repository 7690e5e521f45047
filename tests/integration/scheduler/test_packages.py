"""PackageService over real gRPC (real Redis, the fake trainer), and what CreateJob checks of
a job's package and init_from."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import time
import zipfile

import grpc
import pytest
from grpc import aio

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import experiment_pb2, job_pb2, package_service_pb2_grpc
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.scheduler.v1 import package_service_pb2 as pb
from paddleray.services.client.packaging import build_package, upload_package
from paddleray.services.common import errors, identity, packages
from paddleray.services.scheduler.packages import PackageStore
from support.manifests import write_exported
from support.scheduler import make_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


class _Calls(grpc.UnaryUnaryClientInterceptor, grpc.StreamUnaryClientInterceptor):
    """Records the methods a channel called."""

    def __init__(self) -> None:
        self.methods: list[str] = []

    def intercept_unary_unary(self, continuation, details, request):
        self.methods.append(details.method.rsplit("/", 1)[-1])
        return continuation(details, request)

    def intercept_stream_unary(self, continuation, details, request_iterator):
        self.methods.append(details.method.rsplit("/", 1)[-1])
        return continuation(details, request_iterator)


def _project(root, version: int = 1):
    (root / "my_trainer").mkdir(parents=True, exist_ok=True)
    (root / "my_trainer" / "train.py").write_text(f"VERSION = {version}\ndef train(config, ctx):\n    pass\n")
    return root


def _upload(address: str, root, calls: _Calls | None = None) -> str:
    with grpc.insecure_channel(address) as channel:
        return upload_package(grpc.intercept_channel(channel, calls) if calls else channel, root)


def _raw_upload(address: str, messages) -> pb.UploadPackageResponse:
    with grpc.insecure_channel(address) as channel:
        return package_service_pb2_grpc.PackageServiceStub(channel).UploadPackage(iter(messages), timeout=30)


def _header(data: bytes, **overrides) -> pb.UploadPackageRequest:
    fields = {"sha256": hashlib.sha256(data).hexdigest(), "size_bytes": len(data)} | overrides
    return pb.UploadPackageRequest(header=pb.PackageHeader(**fields))


def _zip(entries: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in entries.items():
            archive.writestr(name, text)
    return buffer.getvalue()


async def test_an_unchanged_directory_is_uploaded_once(stack_factory, tmp_path):
    root = _project(tmp_path / "project")
    async with stack_factory(storage_root=tmp_path / "storage") as stack:
        calls = _Calls()
        uri = await asyncio.to_thread(_upload, stack.address, root, calls)
        digest = build_package(root).sha256
        assert uri == f"paddleray://packages/sha256-{digest}"
        stored = tmp_path / "storage" / "packages" / f"sha256-{digest}.zip"
        assert stored.read_bytes() == build_package(root).data
        assert calls.methods == ["GetPackage", "UploadPackage"]

        again = _Calls()
        assert await asyncio.to_thread(_upload, stack.address, root, again) == uri
        assert again.methods == ["GetPackage"]

        _project(root, version=2)
        changed = await asyncio.to_thread(_upload, stack.address, root)
        assert changed != uri and stored.exists()
        assert sorted(p.name for p in (tmp_path / "storage" / "packages").iterdir()) == sorted(
            [stored.name, f"sha256-{packages.digest_from_uri(changed, 'x')}.zip"]
        ), "no temporary files are left behind"

        async with aio.insecure_channel(stack.address) as channel:
            stub = package_service_pb2_grpc.PackageServiceStub(channel)
            found = (await stub.GetPackage(pb.GetPackageRequest(name=f"packages/sha256-{digest}"))).package
            assert (found.uri, found.size_bytes, found.file_count) == (uri, stored.stat().st_size, 1)
            with pytest.raises(aio.AioRpcError) as missing:
                await stub.GetPackage(pb.GetPackageRequest(name="packages/sha256-" + "0" * 64))
            assert missing.value.code() == grpc.StatusCode.NOT_FOUND
            with pytest.raises(aio.AioRpcError) as malformed:
                await stub.GetPackage(pb.GetPackageRequest(name="packages/latest"))
            assert malformed.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "name" in malformed.value.details()


async def test_bad_uploads_are_refused_and_leave_nothing(stack_factory, tmp_path):
    good = _zip({"m.py": "x = 1\n"})
    chunk = pb.UploadPackageRequest(chunk=good)
    cases = [
        ([chunk], grpc.StatusCode.INVALID_ARGUMENT, "header"),
        ([_header(good, sha256="f" * 64), chunk], grpc.StatusCode.INVALID_ARGUMENT, "header.sha256"),
        ([_header(good, sha256="not-hex"), chunk], grpc.StatusCode.INVALID_ARGUMENT, "header.sha256"),
        ([_header(good, size_bytes=len(good) + 1), chunk], grpc.StatusCode.INVALID_ARGUMENT, "chunk: received"),
        ([_header(good, size_bytes=len(good) - 1), chunk], grpc.StatusCode.INVALID_ARGUMENT, "chunk: more bytes"),
        ([_header(good), _header(good)], grpc.StatusCode.INVALID_ARGUMENT, "header"),
        ([_header(b"no zip"), pb.UploadPackageRequest(chunk=b"no zip")], grpc.StatusCode.INVALID_ARGUMENT, "not a valid zip"),
        ([_header(evil := _zip({"../escape.py": "x"})), pb.UploadPackageRequest(chunk=evil)],
         grpc.StatusCode.INVALID_ARGUMENT, "outside the package"),
        ([_header(b"x" * 5000, size_bytes=5000)], grpc.StatusCode.RESOURCE_EXHAUSTED,
         "limit is 4096 bytes (PADDLERAY_SCHEDULER_PACKAGE_MAX_BYTES)"),
    ]
    async with stack_factory(storage_root=tmp_path / "storage", package_max_bytes=4096) as stack:
        for messages, code, text in cases:
            with pytest.raises(grpc.RpcError) as refused:
                await asyncio.to_thread(_raw_upload, stack.address, messages)
            assert refused.value.code() == code, (text, refused.value.details())
            assert text in refused.value.details()
        directory = tmp_path / "storage" / "packages"
        assert not directory.exists() or list(directory.iterdir()) == []
        stored = await asyncio.to_thread(_raw_upload, stack.address, [_header(good), chunk])
        assert stored.package.file_count == 1


def _package_job(uri: str, entrypoint: str = "my_trainer.train:train") -> job_pb2.Job:
    job = make_job(entrypoint)
    job.spec.runtime_env.working_dir = uri
    return job


async def test_create_job_checks_the_package_and_its_entrypoint(stack_factory, tmp_path):
    root = _project(tmp_path / "project")
    async with stack_factory(storage_root=tmp_path / "storage") as stack:
        uri = await asyncio.to_thread(_upload, stack.address, root)
        (root / "logging").mkdir()
        (root / "logging" / "__init__.py").write_text("")
        shadowing = await asyncio.to_thread(_upload, stack.address, root)
        created = await stack.create(_package_job(uri))
        assert created.spec.runtime_env.working_dir == uri
        assert created.state == job_pb2.JOB_STATE_QUEUED

        for job, code, text in [
            (_package_job("paddleray://packages/sha256-" + "0" * 64), grpc.StatusCode.FAILED_PRECONDITION,
             "job.spec.runtime_env.working_dir: package"),
            (_package_job("paddleray://packages/latest"), grpc.StatusCode.INVALID_ARGUMENT,
             "job.spec.runtime_env.working_dir"),
            (_package_job(uri, "my_trainer.other:train"), grpc.StatusCode.PERMISSION_DENIED,
             "job.spec.entrypoint: module 'my_trainer.other'"),
            (_package_job(uri, "os:system"), grpc.StatusCode.PERMISSION_DENIED, "job.spec.entrypoint"),
            (make_job("os:system"), grpc.StatusCode.PERMISSION_DENIED, "not under an allowed prefix"),
            (_package_job(shadowing), grpc.StatusCode.INVALID_ARGUMENT,
             "job.spec.runtime_env.working_dir: the package's top-level logging would replace"),
        ]:
            with pytest.raises(aio.AioRpcError) as refused:
                await stack.create(job)
            assert refused.value.code() == code, refused.value.details()
            assert text in refused.value.details()


def _checkpoint(directory, step: int, loss: float) -> common_pb2.Checkpoint:
    directory.mkdir(parents=True)
    return common_pb2.Checkpoint(uri=str(directory), step=step, metrics={"loss": loss})


async def test_init_from_is_resolved_once_at_create(stack_factory, tmp_path):
    storage = tmp_path / "storage"
    async with stack_factory(storage_root=storage) as stack:
        manager = stack.app.manager
        source = make_job(config={"hang": True})
        source.spec.checkpoint_policy.best_metric = "loss"
        source.spec.checkpoint_policy.best_mode = common_pb2.METRIC_MODE_MIN
        source = await stack.create(source, job_id="baseline")
        record = await manager.record(source.name)
        checkpoints = [_checkpoint(tmp_path / f"ckpt-{step}", step, loss) for step, loss in [(1, 0.9), (2, 0.2), (3, 0.5)]]
        job = job_pb2.Job()
        job.CopyFrom(record.job)
        job.latest_checkpoint.CopyFrom(checkpoints[-1])
        assert await manager.update(record, job, [job_pb2.JobEvent(checkpoint=c) for c in checkpoints])

        def fine_tune(**source_field) -> job_pb2.Job:
            job = make_job()
            job.spec.init_from.CopyFrom(common_pb2.InitFrom(resolved_uri="/etc", **source_field))
            return job

        best = await stack.create(fine_tune(job="jobs/baseline"))
        assert best.spec.init_from.resolved_uri == checkpoints[1].uri, "the best checkpoint by loss, not the newest"
        assert best.spec.init_from.job == "jobs/baseline"
        (tmp_path / "ckpt-2").rmdir()  # retention removed it: the next best that is still there
        assert (await stack.create(fine_tune(job="jobs/baseline"))).spec.init_from.resolved_uri == checkpoints[2].uri

        under_root = _checkpoint(storage / "ckpt-0", 0, 1.0)  # checkpoint_uri: under the storage root only
        direct = await stack.create(fine_tune(checkpoint_uri=under_root.uri))
        assert direct.spec.init_from.resolved_uri == under_root.uri, "a client's resolved_uri is replaced"

        version = storage / "models" / "digits" / "versions" / "3"
        (version / "paddle").mkdir(parents=True)
        write_exported(version, "digits", 3, tenant="default")
        exported = await stack.create(fine_tune(model_version="models/digits/versions/3"))
        assert exported.spec.init_from.resolved_uri == str(version)

        await stack.create(make_job(), job_id="fresh")
        for job, code, field in [
            (fine_tune(job="jobs/fresh"), grpc.StatusCode.FAILED_PRECONDITION, "job.spec.init_from.job: jobs/fresh has no checkpoint"),
            (fine_tune(job="jobs/nope"), grpc.StatusCode.NOT_FOUND, "job.spec.init_from.job: jobs/nope not found"),
            (fine_tune(job="baseline"), grpc.StatusCode.INVALID_ARGUMENT, "job.spec.init_from.job"),
            (fine_tune(checkpoint_uri=str(storage / "nope")), grpc.StatusCode.FAILED_PRECONDITION,
             "job.spec.init_from.checkpoint_uri"),
            (fine_tune(checkpoint_uri=str(tmp_path / "ckpt-1")), grpc.StatusCode.INVALID_ARGUMENT,
             "job.spec.init_from.checkpoint_uri: must be a path under the storage root"),
            (fine_tune(model_version="models/digits/versions/4"), grpc.StatusCode.NOT_FOUND,
             "job.spec.init_from.model_version: models/digits/versions/4 not found"),
            (fine_tune(model_version="models/../versions/1"), grpc.StatusCode.INVALID_ARGUMENT,
             "job.spec.init_from.model_version"),
            (fine_tune(), grpc.StatusCode.INVALID_ARGUMENT, "job.spec.init_from: set one of"),
        ]:
            with pytest.raises(aio.AioRpcError) as refused:
                await stack.create(job)
            assert refused.value.code() == code, refused.value.details()
            assert field in refused.value.details()



async def test_a_sweep_template_is_checked_like_create_job(stack_factory, tmp_path):
    async with stack_factory(storage_root=tmp_path / "storage") as stack:
        template = _package_job("paddleray://packages/sha256-" + "1" * 64)
        experiment = experiment_pb2.Experiment(trial_template=template, metric="loss", mode=common_pb2.METRIC_MODE_MIN)
        experiment.search_space.parameters["lr"].grid.values.add().number_value = 0.1
        with pytest.raises(
                errors.FailedPrecondition, match=r"^experiment\.trial_template\.spec\.runtime_env\.working_dir"):
            await stack.app.experiments.create(experiment, caller=identity.LOCAL)
        assert (await stack.stub.ListJobs(js.ListJobsRequest())).jobs == []


async def test_uploads_need_the_token_when_the_scheduler_has_one(stack_factory, tmp_path):
    root = _project(tmp_path / "project")

    def upload(metadata):
        with grpc.insecure_channel(stack.address) as channel:
            return upload_package(channel, root, metadata)

    async with stack_factory(storage_root=tmp_path / "storage", auth_token="s3cret") as stack:
        with pytest.raises(grpc.RpcError) as refused:
            await asyncio.to_thread(upload, None)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        data = build_package(root).data
        with pytest.raises(grpc.RpcError) as streamed:
            await asyncio.to_thread(_raw_upload, stack.address, [_header(data), pb.UploadPackageRequest(chunk=data)])
        assert streamed.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert not (tmp_path / "storage" / "packages").exists()
        uri = await asyncio.to_thread(upload, [("authorization", "Bearer s3cret")])
        assert uri == build_package(root).uri


def test_stale_upload_files_are_removed(tmp_path):
    store = PackageStore(tmp_path, max_bytes=1024)
    store.directory.mkdir()
    stale, fresh = store.directory / ".tmp-old.zip", store.directory / ".tmp-new.zip"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"x")
    kept = store.directory / ("sha256-" + "a" * 64 + ".zip")
    kept.write_bytes(b"x")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    os.utime(kept, (time.time() - 7200, time.time() - 7200))
    assert store.remove_stale_uploads() == 1
    assert sorted(p.name for p in store.directory.iterdir()) == sorted([fresh.name, kept.name])


async def test_unused_packages_are_collected_unless_an_unfinished_job_names_them(stack_factory, tmp_path):
    a, b, c = (_project(tmp_path / name, version) for name, version in (("a", 1), ("b", 2), ("c", 3)))
    async with stack_factory(storage_root=tmp_path / "storage", dispatch=False) as stack:
        queued_uri, done_uri, fresh_uri = [await asyncio.to_thread(_upload, stack.address, p) for p in (a, b, c)]
        queued = await stack.create(_package_job(queued_uri))
        finished = await stack.create(_package_job(done_uri))
        await stack.stub.CancelJob(js.CancelJobRequest(name=finished.name))
        store = stack.app.packages
        digest = {uri: packages.digest_from_uri(uri, "uri") for uri in (queued_uri, done_uri, fresh_uri)}
        # Last used two weeks ago, except `fresh` (uploaded just now, named by no job yet).
        old = time.time() - 14 * 24 * 3600
        for uri in (queued_uri, done_uri):
            os.utime(store.path(digest[uri]), (old, old))

        removed = await stack.app.package_collector.collect_once()
        assert removed == [digest[done_uri]]  # its only job has finished
        assert store.path(digest[queued_uri]).exists() and store.path(digest[fresh_uri]).exists()
        assert (await stack.stub.GetJob(js.GetJobRequest(name=queued.name))).job.state == job_pb2.JOB_STATE_QUEUED
        # A collected package is gone as far as new jobs go: upload it again.
        with pytest.raises(aio.AioRpcError) as refused:
            await stack.create(_package_job(done_uri))
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        # Naming a package in a new job keeps it a whole retention period more.
        os.utime(store.path(digest[queued_uri]), (old, old))
        await stack.create(_package_job(queued_uri))
        assert time.time() - store.path(digest[queued_uri]).stat().st_mtime < 60


async def test_a_zero_retention_keeps_every_package(stack_factory, tmp_path):
    async with stack_factory(storage_root=tmp_path / "storage", dispatch=False, package_retention_s=0) as stack:
        uri = await asyncio.to_thread(_upload, stack.address, _project(tmp_path / "p"))
        path = stack.app.packages.path(packages.digest_from_uri(uri, "uri"))
        os.utime(path, (0, 0))
        assert await stack.app.package_collector.collect_once() == []
        assert path.exists()
