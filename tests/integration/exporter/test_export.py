"""ExportModel through the real exporter on the shared Ray head: the long-running states, the
validation figures, VALIDATION_FAILED and FAILED, and the request rules."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import grpc
import pytest

from paddleray.common.v1 import common_pb2
from paddleray.exporter.v1 import exporter_service_pb2 as es
from paddleray.exporter.v1 import model_pb2
from support.exporter import BUILDERS, WORKERS, linear_checkpoint

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
S = model_pb2.ModelVersionState
ENV = common_pb2.RuntimeEnv(env_vars={"PYTHONPATH": str(WORKERS)})


def test_export_of_a_checkpoint_returns_at_once_then_validates_and_is_ready(client, storage_root):
    checkpoint = linear_checkpoint(storage_root)
    first = client.export(parent="models/linear", checkpoint_uri=checkpoint, model_builder=f"{BUILDERS}:build_linear",
                          runtime_env=ENV, request_id="linear-1")
    assert first.name == "models/linear/versions/1" and first.state == S.MODEL_VERSION_STATE_EXPORTING
    states = [v.state for v in client.watch(first.name)]
    assert states[0] == S.MODEL_VERSION_STATE_EXPORTING and states[-1] == S.MODEL_VERSION_STATE_READY
    assert states == [S.MODEL_VERSION_STATE_EXPORTING, S.MODEL_VERSION_STATE_VALIDATING, S.MODEL_VERSION_STATE_READY]
    done = client.get(first.name)
    assert done.update_time.ToNanoseconds() > done.create_time.ToNanoseconds()
    check = done.validation
    assert check.passed and check.num_samples == 4 and check.atol == 1e-5 and check.rtol == 1e-5
    (paddle_check,) = check.backends
    assert paddle_check.backend == model_pb2.BACKEND_PADDLE_INFERENCE and paddle_check.passed
    assert 0 <= paddle_check.max_abs_error <= 1e-5 and paddle_check.median_latency.ToNanoseconds() > 0
    # The signature comes from the builder module's input_spec() and the predictor's outputs.
    assert [(t.name, list(t.shape), t.datatype) for t in done.inputs] == [("x", [-1, 8], model_pb2.DATA_TYPE_FP32)]
    assert [(t.name, list(t.shape)) for t in done.outputs] == [("fetch_name_0", [-1, 3])]
    (artifact,) = done.artifacts
    version_dir = storage_root / "models" / "linear" / "versions" / "1"
    assert artifact.uri == str(version_dir / "paddle")
    files = sorted(p.name for p in Path(artifact.uri).iterdir())
    assert files == ["inference.json", "inference.pdiparams"]
    assert artifact.size_bytes == sum(p.stat().st_size for p in Path(artifact.uri).iterdir())
    manifest = json.loads((version_dir / "manifest.json").read_text())
    # Each file's SHA-256, what a replica loading from an object store checks its copy against.
    digests = manifest.pop("files")
    assert digests == {f"paddle/{p.name}": hashlib.sha256(p.read_bytes()).hexdigest()
                       for p in Path(artifact.uri).iterdir()}
    assert manifest == {
        "format_version": 1, "model": "models/linear", "version": "models/linear/versions/1",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 8]}],
        "outputs": [{"name": "fetch_name_0", "datatype": "FP32", "shape": [-1, 3]}],
        "artifacts": {"paddle": "paddle"}, "predictor_outputs": ["fetch_name_0"],
        "tenant": "default",  # whose version: the scheduler's init_from.model_version checks it
    }
    assert done.source_checkpoint.uri == checkpoint and done.model_builder == f"{BUILDERS}:build_linear"
    # The same request_id again: the same version, no new one.
    again = client.export(parent="models/linear", checkpoint_uri=checkpoint, model_builder=f"{BUILDERS}:build_linear",
                          runtime_env=ENV, request_id="linear-1")
    assert again.name == first.name
    # The same request_id with another request (here: ONNX too) is taken (AIP-155), not answered
    # with the first version.
    with pytest.raises(grpc.RpcError) as reused:
        client.export(parent="models/linear", checkpoint_uri=checkpoint, model_builder=f"{BUILDERS}:build_linear",
                      runtime_env=ENV, request_id="linear-1", formats=[model_pb2.EXPORT_FORMAT_ONNX])
    assert reused.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert reused.value.details().startswith("request_id: already used by a different request")
    model = client.stub.GetModel(es.GetModelRequest(name="models/linear")).model
    assert model.latest_version == 1


def test_onnx_is_written_beside_and_validated_with_onnx_runtime(client, storage_root):
    version = client.export(parent="models/both", checkpoint_uri=linear_checkpoint(storage_root),
                            model_builder=f"{BUILDERS}:build_linear", runtime_env=ENV,
                            formats=[model_pb2.EXPORT_FORMAT_ONNX])
    done = client.wait_done(version.name)
    assert done.state == S.MODEL_VERSION_STATE_READY, done.state_reason
    by_format = {a.format: a for a in done.artifacts}
    onnx = by_format[model_pb2.EXPORT_FORMAT_ONNX]
    assert onnx.uri.endswith("/onnx/model.onnx") and onnx.size_bytes == Path(onnx.uri).stat().st_size > 0
    checks = {b.backend: b for b in done.validation.backends}
    assert set(checks) == {model_pb2.BACKEND_PADDLE_INFERENCE, model_pb2.BACKEND_ONNX_RUNTIME}
    assert checks[model_pb2.BACKEND_ONNX_RUNTIME].passed and checks[model_pb2.BACKEND_ONNX_RUNTIME].max_abs_error <= 1e-5
    manifest = json.loads((Path(onnx.uri).parent.parent / "manifest.json").read_text())
    assert manifest["artifacts"] == {"paddle": "paddle", "onnx": "onnx/model.onnx"}


def test_a_model_whose_static_graph_differs_ends_validation_failed_with_the_figures(client, storage_root):
    checkpoint = linear_checkpoint(storage_root, "build_noisy")
    version = client.export(parent="models/noisy", checkpoint_uri=checkpoint, model_builder=f"{BUILDERS}:build_noisy",
                            runtime_env=ENV, validation=model_pb2.ValidationOptions(num_samples=2, batch_size=3))
    done = client.wait_done(version.name)
    assert done.state == S.MODEL_VERSION_STATE_VALIDATION_FAILED, done.state_reason
    (paddle_check,) = done.validation.backends
    assert not done.validation.passed and not paddle_check.passed and done.validation.num_samples == 2
    # paddle.rand draws from [0, 1): the two graphs differ by far more than the tolerance.
    assert paddle_check.max_abs_error > 1e-3 and paddle_check.max_rel_error > 1e-4
    assert "BACKEND_PADDLE_INFERENCE" in done.state_reason and "atol=1e-05" in done.state_reason


def test_a_builder_that_raises_ends_failed_with_its_error(client, storage_root):
    version = client.export(parent="models/broken", checkpoint_uri=linear_checkpoint(storage_root),
                            model_builder=f"{BUILDERS}:build_failing", runtime_env=ENV)
    done = client.wait_done(version.name)
    assert done.state == S.MODEL_VERSION_STATE_FAILED
    assert "ValueError: this builder cannot build anything" in done.state_reason
    assert done.failure.kind == common_pb2.FAILURE_KIND_USER_CODE and "build_failing" in done.failure.traceback
    assert not (Path(done.artifacts[0].uri).exists() if done.artifacts else False)


def test_supplied_sample_inputs_are_what_validation_runs_on(client, storage_root):
    import numpy as np

    sample = np.arange(16, dtype=np.float32).reshape(2, 8)
    version = client.export(
        parent="models/sampled", checkpoint_uri=linear_checkpoint(storage_root), model_builder=f"{BUILDERS}:build_linear",
        runtime_env=ENV, inputs=[model_pb2.TensorSpec(name="x", shape=[-1, 8], datatype=model_pb2.DATA_TYPE_FP32)],
        validation=model_pb2.ValidationOptions(sample_inputs=[model_pb2.TensorValue(
            name="x", shape=[2, 8], raw_contents=sample.tobytes())]),
    )
    done = client.wait_done(version.name)
    assert done.state == S.MODEL_VERSION_STATE_READY, done.state_reason
    assert done.validation.num_samples == 1


BAD_REQUESTS = [
    (dict(parent="model/x", checkpoint_uri="c"), "parent"),
    (dict(parent="models/Bad_Id", checkpoint_uri="c"), "parent"),
    (dict(parent="models/x"), "source"),
    (dict(parent="models/x", job="job/1"), "job"),
    (dict(parent="models/x", checkpoint_uri="/etc"), "checkpoint_uri"),
    (dict(parent="models/x", job="jobs/a", model_builder="no-colon"), "model_builder"),
    (dict(parent="models/x", job="jobs/a", inputs=[model_pb2.TensorSpec(name="x", shape=[0, 8], datatype=9)]),
     "inputs[0].shape"),
    (dict(parent="models/x", job="jobs/a", inputs=[model_pb2.TensorSpec(name="x", shape=[-1, 8])]),
     "inputs[0].datatype"),
    (dict(parent="models/x", job="jobs/a", formats=[model_pb2.EXPORT_FORMAT_UNSPECIFIED]), "formats[0]"),
    (dict(parent="models/x", job="jobs/a", validation=model_pb2.ValidationOptions(atol=-1)), "validation.atol"),
    (dict(parent="models/x", job="jobs/a", validation=model_pb2.ValidationOptions(num_samples=65)),
     "validation.num_samples"),
    (dict(parent="models/x", job="jobs/a", request_id="r" * 129), "request_id"),
    (dict(parent="models/x", job="jobs/a", labels={"-bad": "x"}), "labels"),
]


@pytest.mark.parametrize(("request_fields", "field"), BAD_REQUESTS, ids=[f for _, f in BAD_REQUESTS])
def test_bad_requests_are_invalid_argument_naming_the_field(client, request_fields, field):
    with pytest.raises(grpc.RpcError) as info:
        client.export(**request_fields)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert info.value.details().startswith(field), info.value.details()


def test_a_builder_outside_the_allowlist_is_permission_denied(client, storage_root):
    with pytest.raises(grpc.RpcError) as info:
        client.export(parent="models/x", checkpoint_uri=linear_checkpoint(storage_root), model_builder="os.path:join")
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "model_builder" in info.value.details()


def test_a_missing_checkpoint_is_not_found_and_a_job_needs_a_scheduler(client, storage_root):
    with pytest.raises(grpc.RpcError) as info:
        client.export(parent="models/x", checkpoint_uri=str(storage_root / "nothing-here"), model_builder=f"{BUILDERS}:b")
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as info:
        client.export(parent="models/x", job="jobs/unknown")
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "scheduler_address" in info.value.details()


def test_models_and_versions_are_listed_updated_and_deleted_over_grpc(client, storage_root):
    from google.protobuf import field_mask_pb2

    version = client.export(parent="models/registry", checkpoint_uri=linear_checkpoint(storage_root),
                            model_builder=f"{BUILDERS}:build_linear", runtime_env=ENV, display_name="Registry",
                            labels={"team": "vision"})
    client.wait_done(version.name)
    stub = client.stub
    model = stub.GetModel(es.GetModelRequest(name="models/registry")).model
    assert model.display_name == "Registry" and dict(model.labels) == {"team": "vision"} and model.latest_version == 1
    names = []
    token = ""
    while True:
        page = stub.ListModels(es.ListModelsRequest(page_size=2, page_token=token))
        names += [m.name for m in page.models]
        if not (token := page.next_page_token):
            break
    assert "models/registry" in names and len(names) == len(set(names))
    updated = stub.UpdateModel(es.UpdateModelRequest(model=model_pb2.Model(name="models/registry", display_name="R2"),
                                                     update_mask=field_mask_pb2.FieldMask(paths=["display_name"]))).model
    assert updated.display_name == "R2" and dict(updated.labels) == {"team": "vision"}
    listed = stub.ListModelVersions(es.ListModelVersionsRequest(parent="models/registry")).model_versions
    assert [v.name for v in listed] == [version.name]
    stub.DeleteModelVersion(es.DeleteModelVersionRequest(name=version.name))
    assert not (storage_root / "models" / "registry" / "versions" / "1").exists()
    with pytest.raises(grpc.RpcError) as info:
        stub.GetModelVersion(es.GetModelVersionRequest(name=version.name))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    stub.DeleteModel(es.DeleteModelRequest(name="models/registry"))
    with pytest.raises(grpc.RpcError) as info:
        stub.GetModel(es.GetModelRequest(name="models/registry"))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


def _stored_package(storage_root: Path, root: Path) -> str:
    """What the scheduler's UploadPackage leaves on the shared storage root; returns the URI."""
    from paddleray.services.client.packaging import build_package
    from paddleray.services.common import packages

    package = build_package(root)
    path = packages.zip_path(storage_root, package.sha256)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(package.data)
    return package.uri


def test_a_checkpoint_exports_with_the_builder_of_a_package_under_no_allowlist(client, storage_root, tmp_path):
    # A project outside the repo, importable by no service and under no allowlist prefix.
    (tmp_path / "project" / "mylinear").mkdir(parents=True)
    (tmp_path / "project" / "mylinear" / "model.py").write_text(
        "from paddle import nn\nfrom paddle.static import InputSpec\n\n"
        "def build_model(config):\n    return nn.Linear(8, 3)\n\n"
        "def input_spec():\n    return [InputSpec([None, 8], 'float32', 'x')]\n")
    uri = _stored_package(storage_root, tmp_path / "project")
    package_env = common_pb2.RuntimeEnv(working_dir=uri)
    checkpoint = linear_checkpoint(storage_root)
    version = client.export(parent="models/packaged", checkpoint_uri=checkpoint,
                            model_builder="mylinear.model:build_model", runtime_env=package_env)
    done = client.wait_done(version.name)
    assert done.state == S.MODEL_VERSION_STATE_READY, done.state_reason
    assert done.validation.passed and [t.name for t in done.inputs] == ["x"]

    with pytest.raises(grpc.RpcError) as denied:  # a module the package does not hold
        client.export(parent="models/packaged", checkpoint_uri=checkpoint, model_builder="mylinear.other:build_model",
                      runtime_env=package_env)
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "model_builder" in denied.value.details() and "mylinear/other.py" in denied.value.details()
    with pytest.raises(grpc.RpcError) as missing:  # a package this storage root does not hold
        client.export(parent="models/packaged", checkpoint_uri=checkpoint, model_builder="mylinear.model:build_model",
                      runtime_env=common_pb2.RuntimeEnv(working_dir="paddleray://packages/sha256-" + "0" * 64))
    assert missing.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert missing.value.details().startswith("runtime_env.working_dir: package")
