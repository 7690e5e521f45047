from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from paddleray.services.common.errors import InvalidArgument
from paddleray.services.exporter.serving.control import serve_config as sc
from paddleray.services.exporter.serving.replica.batching import merge, rows, split
from paddleray.services.exporter.serving.replica.gpu import replica_gpu_env
from paddleray.services.exporter.serving.spec import (
    MODEL_DEPLOYMENT,
    Autoscaling,
    Batching,
    PredictorOptions,
    ServedModel,
    ServedVersion,
    validate_models,
)


def _v(**kw) -> ServedVersion:
    return ServedVersion(**{"version": "1", "artifact_dir": "/a", **kw})


@pytest.mark.parametrize(
    ("models", "field"),
    [
        ([ServedModel("Bad Name", [_v()])], "models[0].serving_name"),
        ([ServedModel("m\n", [_v()])], "models[0].serving_name"),
        ([ServedModel("m", [_v(version="0")])], "models[0].versions[0].version"),
        ([ServedModel("m", [_v()]), ServedModel("m", [_v()])], "models[1].serving_name"),
        ([ServedModel("m", [])], "models[0].versions"),
        ([ServedModel("m", [_v(), _v()])], "models[0].versions[1].version"),
        ([ServedModel("m", [_v(version="v1")])], "models[0].versions[0].version"),
        ([ServedModel("m", [_v(weight=0)])], "models[0].versions"),
        ([ServedModel("m", [_v(weight=-1)])], "models[0].versions[0].weight"),
        ([ServedModel("m", [_v(backend="tf")])], "models[0].versions[0].backend"),
        ([ServedModel("m", [_v()], batching=Batching(0))], "models[0].batching.max_batch_size"),
        ([ServedModel("m", [_v()], autoscaling=Autoscaling(3, 2))], "models[0].autoscaling"),
        ([ServedModel("m", [_v()], num_gpus=1.5)], "models[0].num_gpus"),
        ([ServedModel("m", [_v()], predictor=PredictorOptions(use_gpu=True))], "models[0].num_gpus"),
        ([ServedModel("m", [_v()], predictor=PredictorOptions(enable_tensorrt=True))], "models[0].predictor.enable_tensorrt"),
        ([ServedModel("m", [_v()], max_ongoing_requests=0)], "models[0].max_ongoing_requests"),
    ],
)
def test_bad_specs_name_the_field(models, field):
    with pytest.raises(InvalidArgument) as info:
        validate_models(models)
    assert info.value.field == field


def test_one_app_per_model_named_by_it_and_routed_by_its_prefix():
    model = ServedModel("m", [_v(), _v(version="2", weight=0.0, backend="onnx")], num_cpus=0.5)
    app = sc.model_app(model, 3, 30.0)
    assert app["name"] == "m" and app["route_prefix"] == "/v2/models/m"
    [deployment] = app["deployments"]
    assert deployment["name"] == MODEL_DEPLOYMENT and deployment["num_replicas"] == 1
    assert deployment["ray_actor_options"] == {"num_cpus": 0.5, "num_gpus": 0.0}
    assert deployment["user_config"]["generation"] == 3
    assert deployment["user_config"]["versions"] == {
        "1": {"artifact_dir": "/a", "backend": "paddle", "weight": 1.0},
        "2": {"artifact_dir": "/a", "backend": "onnx", "weight": 0.0}}
    scaled = sc.model_app(ServedModel("m", [_v()], autoscaling=Autoscaling(1, 4, 8), num_gpus=0.25, memory=2**30),
                          0, 30.0)["deployments"][0]
    assert scaled["autoscaling_config"]["max_replicas"] == 4 and "num_replicas" not in scaled
    assert scaled["ray_actor_options"] == {"num_cpus": 1.0, "num_gpus": 0.25, "memory": 2**30}
    assert scaled["max_ongoing_requests"] == 256


def test_what_a_rollout_changes_is_user_config_only():
    """Traffic, versions, predictor options and batching reconfigure replicas in place (user_config);
    only resources and the GPU setup (args, actor options) start new replicas."""
    base = sc.model_app(ServedModel("m", [_v()]), 0, 30.0)
    for change in ({"versions": [_v(weight=0.3), _v(version="2")]}, {"batching": Batching(16, 0.01)},
                   {"predictor": PredictorOptions(enable_mkldnn=True)}, {"num_replicas": 3}):
        changed = sc.model_app(ServedModel("m", **{"versions": [_v()], **change}), 0, 30.0)
        assert changed["args"] == base["args"]
        assert changed["deployments"][0]["ray_actor_options"] == base["deployments"][0]["ray_actor_options"]
    assert sc.model_app(ServedModel("m", [_v()], num_gpus=0.5), 0, 30.0)["args"] != base["args"]


def test_the_deploy_config_is_a_valid_serve_schema():
    from ray.serve.schema import ServeDeploySchema

    apps = [sc.server_app(), sc.model_app(ServedModel("m", [_v()]), 1, 30.0)]
    schema = ServeDeploySchema.model_validate(sc.deploy_config(apps))
    assert {a.name: a.route_prefix for a in schema.applications} == {sc.SERVER_APP: "/v2", "m": "/v2/models/m"}
    deployed = next(a for a in schema.applications if a.name == "m").model_dump(exclude_unset=True)
    assert sc.deployed_table(deployed)["generation"] == 1
    # The server app's name can never be a model's (serving names start with a letter or digit).
    with pytest.raises(InvalidArgument):
        validate_models([ServedModel(sc.SERVER_APP, [_v()])])


def test_batches_stack_and_split_by_rows():
    a = {"x": np.ones((2, 3), np.float32)}
    b = {"x": np.zeros((5, 3), np.float32)}
    merged, sizes = merge([a, b])
    assert merged["x"].shape == (7, 3) and sizes == [2, 5] and rows(a) == 2
    parts = split({"y": np.arange(7)}, sizes)
    assert [p["y"].tolist() for p in parts] == [[0, 1], [2, 3, 4, 5, 6]]
    assert merge([a, {"x": np.zeros((1, 4), np.float32)}]) == (None, [])
    assert rows({"x": np.zeros((2, 1)), "n": np.zeros((3, 1))}) is None


def test_a_gpu_fraction_caps_the_replicas_memory():
    # No GPU here: Ray's assignment and nvidia-smi's answer are given (as the trainer's tests do).
    env = replica_gpu_env(0.25, ["3"], probe=lambda device: 16_000 if device == "3" else None)
    assert env["CUDA_VISIBLE_DEVICES"] == "3" and env["FLAGS_selected_gpus"] == "0"
    assert env["FLAGS_fraction_of_gpu_memory_to_use"] == "0.2500" and env["FLAGS_gpu_memory_limit_mb"] == "4000"
    whole = replica_gpu_env(1, ["0"], probe=lambda device: 16_000)
    assert "FLAGS_fraction_of_gpu_memory_to_use" not in whole
    assert replica_gpu_env(0, [], probe=lambda device: None) == {}


def test_specs_are_plain_dataclasses():
    assert dataclasses.is_dataclass(ServedVersion) and dataclasses.asdict(PredictorOptions())["enable_mkldnn"] is False
