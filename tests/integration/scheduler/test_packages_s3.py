"""Uploaded packages on an object-store storage root (scheduler/object_packages.py), on a real
S3 API server (moto's server mode, tests/support/s3.py): uploaded through PackageService over
gRPC, published as one object, named by CreateJob, resolved to a local zip by the trainer's
lookup (common/packages.py: stored_package), and collected when unused."""

from __future__ import annotations

import asyncio
import time
import zipfile

import grpc
import pytest
from grpc import aio

from paddleray.scheduler.v1 import package_service_pb2 as pb
from paddleray.scheduler.v1 import package_service_pb2_grpc
from paddleray.services.client.packaging import upload_package
from paddleray.services.common import errors, packages
from paddleray.services.scheduler.object_packages import ObjectPackageStore
from support.scheduler import make_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _project(root, version: int):
    (root / "my_trainer").mkdir(parents=True, exist_ok=True)
    (root / "my_trainer" / "train.py").write_text(f"VERSION = {version}\ndef train(config, ctx):\n    pass\n")
    return root


def _upload(address: str, root) -> str:
    with grpc.insecure_channel(address) as channel:
        return upload_package(channel, root)


def _package_job(uri: str):
    job = make_job("my_trainer.train:train")
    job.spec.runtime_env.working_dir = uri
    return job


async def test_packages_live_on_the_object_store(stack_factory, s3_server, monkeypatch, tmp_path):
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PADDLERAY_CACHE_DIR", str(tmp_path / "cache"))
    bucket = s3_server.new_bucket()
    root = f"s3://{bucket}/cluster"
    a, b = _project(tmp_path / "a", 1), _project(tmp_path / "b", 2)
    async with stack_factory(storage_root=root, dispatch=False) as stack:
        store = stack.app.packages
        assert isinstance(store, ObjectPackageStore)
        uri_a, uri_b = [await asyncio.to_thread(_upload, stack.address, p) for p in (a, b)]
        digest_a, digest_b = (packages.digest_from_uri(u, "uri") for u in (uri_a, uri_b))
        assert {f"cluster/packages/sha256-{d}.zip" for d in (digest_a, digest_b)} <= set(s3_server.keys(bucket))
        described = await package_service_pb2_grpc.PackageServiceStub(aio.insecure_channel(stack.address)).GetPackage(
            pb.GetPackageRequest(name=packages.name(digest_a)))
        assert described.package.file_count == 1 and described.package.size_bytes > 0
        job = await stack.create(_package_job(uri_a))
        assert job.spec.runtime_env.working_dir == uri_a
        assert f"cluster/packages/sha256-{digest_a}.used" in s3_server.keys(bucket), "CreateJob touched it"

        # What the trainer (on another node: a fresh cache) resolves the URI to.
        monkeypatch.setenv("PADDLERAY_CACHE_DIR", str(tmp_path / "trainer-cache"))
        stored = packages.stored_package(uri_a, root, "spec.runtime_env.working_dir")
        monkeypatch.setenv("PADDLERAY_CACHE_DIR", str(tmp_path / "cache"))  # the scheduler's again
        assert stored.zip_path.is_relative_to(tmp_path / "trainer-cache") and stored.files == ("my_trainer/train.py",)
        with zipfile.ZipFile(stored.zip_path) as archive:
            assert b"VERSION = 1" in archive.read("my_trainer/train.py")

        last = store.stored()
        assert set(last) == {digest_a, digest_b} and all(time.time() - t < 120 for t in last.values())
        later = time.time() + 3600
        assert store.collect({digest_a}, retention_s=1800, now=later) == [digest_b]
        assert store.collect(set(), retention_s=7200, now=later) == [], "used within the retention period"
        assert set(store.stored()) == {digest_a}
        with pytest.raises(errors.FailedPrecondition, match="is not in this service's storage root"):
            packages.stored_package(uri_b, root, "spec.runtime_env.working_dir")
        with pytest.raises(aio.AioRpcError) as refused:
            await stack.create(_package_job(uri_b))
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
