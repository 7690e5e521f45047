from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from paddleray.services.common.errors import InvalidArgument
from paddleray.services.exporter.serving import serve_config as sc
from paddleray.services.exporter.serving.artifact import load_artifact
from paddleray.services.exporter.serving.batching import merge, rows, split
from paddleray.services.exporter.serving.controller import _routable
from paddleray.services.exporter.serving.gpu import replica_gpu_env
from paddleray.services.exporter.serving.spec import (
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
        ([ServedModel("m", [_v(batching=Batching(0))])], "models[0].versions[0].batching.max_batch_size"),
        ([ServedModel("m", [_v(autoscaling=Autoscaling(3, 2))])], "models[0].versions[0].autoscaling"),
        ([ServedModel("m", [_v(num_gpus=1.5)])], "models[0].versions[0].num_gpus"),
        ([ServedModel("m", [_v(predictor=PredictorOptions(use_gpu=True))])], "models[0].versions[0].num_gpus"),
        ([ServedModel("m", [_v(predictor=PredictorOptions(enable_tensorrt=True))])], "models[0].versions[0].predictor.enable_tensorrt"),
        ([ServedModel("m", [_v()], direct_port=70000)], "models[0].direct_port"),
        ([ServedModel("m", [_v()], direct_port=9100), ServedModel("n", [_v()], direct_port=9100)], "models[1].direct_port"),
    ],
)
def test_bad_specs_name_the_field(models, field):
    with pytest.raises(InvalidArgument) as info:
        validate_models(models)
    assert info.value.field == field


def test_app_names_change_with_what_needs_new_replicas_only(mlp_artifact):
    artifact = load_artifact(mlp_artifact[0])
    model = ServedModel("m", [_v()])
    base = sc.model_app(model, _v(), artifact)
    assert base["route_prefix"] is None and base["deployments"][0]["name"] == sc.MODEL_DEPLOYMENT
    # Traffic, replicas and batching are changed in place: same app.
    for change in ({"weight": 0.3}, {"num_replicas": 3}, {"batching": Batching(16, 0.01)}):
        assert sc.model_app(model, _v(**change), artifact)["name"] == base["name"]
    # Predictor, backend or resources need new replicas: a new app beside the old one.
    for change in ({"predictor": PredictorOptions(enable_mkldnn=True)}, {"num_cpus": 2.0}, {"num_gpus": 0.5}):
        assert sc.model_app(model, _v(**change), artifact)["name"] != base["name"]
    scaled = sc.model_app(model, _v(autoscaling=Autoscaling(1, 4, 8), batching=Batching(128)), artifact)["deployments"][0]
    assert scaled["autoscaling_config"]["max_replicas"] == 4 and "num_replicas" not in scaled
    assert scaled["max_ongoing_requests"] == 64
    assert scaled["ray_actor_options"] == {"num_cpus": 1.0, "num_gpus": 0.0}
    assert sc.model_app(model, _v(num_gpus=0.25, memory=2**30), artifact)["deployments"][0]["ray_actor_options"] == {
        "num_cpus": 1.0, "num_gpus": 0.25, "memory": 2**30,
    }


def test_a_direct_endpoint_is_in_the_app_and_its_routing_table_in_user_config(mlp_artifact):
    from ray.serve.schema import ServeDeploySchema

    artifact = load_artifact(mlp_artifact[0])
    plain = sc.model_app(ServedModel("m", [_v()]), _v(), artifact)
    direct = sc.model_app(ServedModel("m", [_v()], direct_port=9100), _v(), artifact, direct_host="10.0.0.5")
    # Where the endpoint listens needs new replicas (a new app); its routing table does not.
    assert direct["name"] != plain["name"]
    assert (direct["args"]["direct_host"], direct["args"]["direct_port"]) == ("10.0.0.5", 9100)
    table = {"m": {"1": sc.route_entry(_v(), artifact, direct["name"])}, "other": {"1": {}}}
    configured = sc.with_model_table(direct, table, 7, 30.0, drain_unrouted=True)
    assert configured["name"] == direct["name"]
    assert configured["deployments"][0]["user_config"] == {
        "generation": 7, "timeout_s": 30.0, "versions": table["m"], "drain_unrouted": True}
    assert sc.with_model_table(plain, table, 7, 30.0) == plain  # no endpoint: no table, no reconfigure
    ServeDeploySchema.model_validate(sc.deploy_config([configured]))


def test_the_deploy_config_is_a_valid_serve_schema(mlp_artifact):
    from ray.serve.schema import ServeDeploySchema

    artifact = load_artifact(mlp_artifact[0])
    app = sc.model_app(ServedModel("m", [_v()]), _v(), artifact)
    table = {"m": {"1": sc.route_entry(_v(), artifact, app["name"])}}
    schema = ServeDeploySchema.model_validate(sc.deploy_config([app, sc.ingress_app(table, 4, 1, 256, 30.0)]))
    assert {a.name for a in schema.applications} == {app["name"], sc.INGRESS_APP}
    ingress = next(a for a in schema.applications if a.name == sc.INGRESS_APP)
    assert sc.ingress_table(ingress.model_dump(exclude_unset=True)) == (table, 4)


def _entry(app: str, weight: float = 1.0) -> dict:
    return {"app": app, "weight": weight, "platform": "p", "signature": {}}


def test_routing_keeps_what_served_when_a_new_app_failed():
    current = {"m": {"1": _entry("old1")}}
    desired = {"m": {"1": _entry("new1", 0.5), "2": _entry("new2", 0.5)}}
    table, failures = _routable(desired, {"new1": "failed to start: boom", "new2": ""}, current, {"old1"})
    assert table["m"]["1"]["app"] == "old1" and table["m"]["1"]["weight"] == 0.5 and table["m"]["2"]["app"] == "new2"
    assert failures == {("m", "1"): "failed to start: boom"}
    # A model whose only new version failed keeps its whole previous table.
    table, _ = _routable({"m": {"2": _entry("new2")}}, {"new2": "not ready"}, current, {"old1"})
    assert table == current
    # A new model that failed is not routed at all.
    table, failures = _routable({"n": {"1": _entry("x")}}, {"x": "failed"}, {}, set())
    assert table == {} and failures == {("n", "1"): "failed"}


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
