"""StartRun validation: every rule names its field; the allowlist is PERMISSION_DENIED."""

from __future__ import annotations

import pytest

from paddleray.common.v1 import common_pb2
from paddleray.services.common import errors, names
from paddleray.services.common.checkpoints import CheckpointStore
from paddleray.services.trainer.spec import check_entrypoint, run_spec
from support.manifests import write_exported

pytestmark = pytest.mark.unit

ALLOW = ["paddleray.services.trainer.examples", "mycorp.train"]


def _spec(**fields) -> common_pb2.TrainingSpec:
    return common_pb2.TrainingSpec(entrypoint="mycorp.train.mlp:main", **fields)


def test_defaults():
    spec = run_spec(_spec(), ALLOW)
    assert spec.group.num_workers == 1
    assert spec.group.resources.num_cpus == 1.0
    assert spec.group.strategy == "PACK"
    assert spec.retention.keep_last == 0
    assert spec.timeout_s is None and spec.resume_from is None


@pytest.mark.parametrize("entrypoint", ["mycorp.train", "mycorp.train:", "mycorp..train:f", ":f", "mycorp.train:f-g"])
def test_malformed_entrypoints(entrypoint):
    with pytest.raises(errors.InvalidArgument) as raised:
        check_entrypoint(entrypoint, ALLOW)
    assert raised.value.field == "spec.entrypoint"


@pytest.mark.parametrize("entrypoint", ["os:system", "mycorp.training.x:f", "mycorp:f", "subprocess:run"])
def test_modules_outside_the_allowlist_are_denied(entrypoint):
    with pytest.raises(errors.PermissionDenied):
        check_entrypoint(entrypoint, ALLOW)


@pytest.mark.parametrize("entrypoint", ["mycorp.train:f", "mycorp.train.deep.mod:f", "paddleray.services.trainer.examples.mlp:train"])
def test_modules_under_an_allowed_prefix_pass(entrypoint):
    check_entrypoint(entrypoint, ALLOW)


@pytest.mark.parametrize(
    "fields,field",
    [
        ({"num_workers": -1}, "spec.num_workers"),
        ({"resources_per_worker": common_pb2.Resources(num_cpus=-1)}, "spec.resources_per_worker.num_cpus"),
        ({"resources_per_worker": common_pb2.Resources(memory_bytes=-5)}, "spec.resources_per_worker.memory_bytes"),
        ({"resources_per_worker": common_pb2.Resources(custom={"GPU": 1})}, "spec.resources_per_worker.custom['GPU']"),
        ({"num_workers": 2, "resources_per_worker": common_pb2.Resources(num_gpus=0.5)}, "spec.resources_per_worker.num_gpus"),
        ({"runtime_env": common_pb2.RuntimeEnv(image="img", working_dir="/src")}, "spec.runtime_env.working_dir"),
        ({"runtime_env": common_pb2.RuntimeEnv(working_dir="/no/such/dir")}, "spec.runtime_env.working_dir"),
        ({"checkpoint_policy": common_pb2.CheckpointPolicy(best_metric="loss")}, "spec.checkpoint_policy.best_mode"),
        ({"checkpoint_policy": common_pb2.CheckpointPolicy(keep_best=2)}, "spec.checkpoint_policy.best_metric"),
        ({"checkpoint_policy": common_pb2.CheckpointPolicy(keep_last=-1)}, "spec.checkpoint_policy.keep_last"),
        ({"placement_strategy": 99}, "spec.placement_strategy"),
    ],
)
def test_bad_fields_are_named(fields, field):
    with pytest.raises(errors.InvalidArgument) as raised:
        run_spec(_spec(**fields), ALLOW)
    assert raised.value.field == field


def test_timeout_and_resume_from(tmp_path):
    with pytest.raises(errors.InvalidArgument, match="^timeout"):
        run_spec(_spec(), ALLOW, timeout_s=0)
    with pytest.raises(errors.InvalidArgument, match="^resume_from.uri"):
        run_spec(_spec(), ALLOW, resume_from_uri=str(tmp_path))  # no manifest: not a checkpoint
    source = tmp_path / "src"
    source.mkdir()
    info = CheckpointStore(tmp_path / "ckpt").commit(source, step=1, epoch=1, metrics={})
    assert run_spec(_spec(), ALLOW, resume_from_uri=str(info.path)).resume_from == str(info.path)


def test_pool_keys_match_for_equal_shapes_only():
    env = common_pb2.RuntimeEnv(env_vars={"B": "2", "A": "1"})
    first = run_spec(_spec(num_workers=2, runtime_env=env), ALLOW).group
    same = run_spec(_spec(num_workers=2, runtime_env=common_pb2.RuntimeEnv(env_vars={"A": "1", "B": "2"})), ALLOW).group
    other = run_spec(_spec(num_workers=1, runtime_env=env), ALLOW).group
    assert first == same and hash(first) == hash(same)
    assert first != other


@pytest.mark.parametrize("run_id", ["", "1abc", "Abc", "a" * 64, "a_b"])
def test_bad_run_ids(run_id):
    with pytest.raises(errors.InvalidArgument, match="^run_id"):
        names.check_id(run_id, "run_id")


def test_init_from_becomes_the_init_checkpoint(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    checkpoint = str(CheckpointStore(tmp_path / "ckpt").commit(source, step=3, epoch=3, metrics={}).path)
    version = tmp_path / "models" / "digits" / "versions" / "2"
    write_exported(version, "digits", 2)

    def init(**fields):
        return run_spec(_spec(init_from=common_pb2.InitFrom(**fields)), ALLOW, storage_root=tmp_path).init_from

    assert run_spec(_spec(), ALLOW).init_from is None
    assert init(checkpoint_uri=checkpoint) == checkpoint
    assert init(job="jobs/base", resolved_uri=checkpoint) == checkpoint, "what the scheduler resolved"
    assert init(model_version="models/digits/versions/2") == str(version)
    for fields, field in [
        ({"job": "jobs/base"}, "spec.init_from.job"),
        ({"checkpoint_uri": str(tmp_path)}, "spec.init_from.checkpoint_uri"),
        ({"model_version": "models/digits/versions/9"}, "spec.init_from.model_version"),
        ({"model_version": "models/../versions/1"}, "spec.init_from.model_version"),
        ({}, "spec.init_from"),
    ]:
        with pytest.raises(errors.InvalidArgument) as raised:
            init(**fields)
        assert raised.value.field == field
