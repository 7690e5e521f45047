"""`paddleray models | deployments | predict` without a server: flags parsed into the SDK's
requests, usage mistakes named by their flag (exit 2) before anything is dialled, an
unreachable exporter as exit 7, and the SDK's tensor helpers (inputs from .npy / .json)."""

from __future__ import annotations

import numpy as np
import pytest

from paddleray.exporter.v1 import deployment_pb2, model_pb2
from paddleray.services.cli.deployments_commands import parse_traffic
from paddleray.services.cli.output import ExitCode
from paddleray.services.client import ConfigError, ServingOptions, new_deployment
from paddleray.services.client.tensors import conform, parse_input
from paddleray.services.localstack.ports import free_port
from support.cli import Cli

pytestmark = pytest.mark.unit


def test_traffic_splits_parse_and_bad_ones_are_usage_errors():
    assert parse_traffic("1=90, 2=10") == {1: 90, 2: 10}
    assert parse_traffic("3=100") == {3: 100}
    for bad in ("1=90,2=20", "1=90,1=10", "v1=100", "1:100", "0=100", "1=101,2=-1"):
        with pytest.raises(Exception, match="--traffic|VERSION=PERCENT|sum to 100|twice") as raised:
            parse_traffic(bad)
        assert raised.type.__name__ == "BadParameter"


def test_a_new_deployment_carries_the_split_and_only_the_options_given():
    options = ServingOptions(num_replicas=2, num_cpus=0.5, max_batch_size=8, batch_wait_s=0.005, backend="onnx")
    deployment = new_deployment("digits", {1: 90, 2: 10}, options, serving_name="dig")
    assert [(t.model_version, t.percent) for t in deployment.traffic] == [
        ("models/digits/versions/1", 90), ("models/digits/versions/2", 10)]
    assert deployment.serving_name == "dig" and deployment.num_replicas == 2
    assert deployment.resources_per_replica.num_cpus == 0.5 and deployment.resources_per_replica.num_gpus == 0
    assert deployment.batching.max_batch_size == 8 and deployment.batching.batch_wait_timeout.ToMilliseconds() == 5
    assert deployment.backend == model_pb2.BACKEND_ONNX_RUNTIME
    assert not deployment.HasField("autoscaling") and not deployment.HasField("predictor")


def test_update_options_name_their_mask_paths_and_keep_the_rest_of_a_sub_message():
    deployed = deployment_pb2.Deployment(num_replicas=3)
    deployed.batching.max_batch_size = 4
    deployed.batching.batch_wait_timeout.FromMilliseconds(20)
    assert ServingOptions(max_batch_size=16).apply(deployed) == ["batching"]
    assert deployed.batching.max_batch_size == 16 and deployed.batching.batch_wait_timeout.ToMilliseconds() == 20
    assert ServingOptions(min_replicas=1, max_replicas=4).apply(deployed) == ["autoscaling"]
    assert ServingOptions(num_replicas=2).apply(deployed) == ["num_replicas", "autoscaling"]
    assert not deployed.HasField("autoscaling")  # a fixed count replaces autoscaling
    assert ServingOptions().apply(deployed) == []


def test_inputs_from_npy_json_and_inline_and_conversion_to_the_models_datatype(tmp_path):
    np.save(tmp_path / "a.npy", np.ones((2, 3)))
    (tmp_path / "b.json").write_text("[[1, 2], [3, 4]]")
    name, array = parse_input(f"x=@{tmp_path / 'a.npy'}")
    assert name == "x" and array.shape == (2, 3) and array.dtype == np.float64
    name, array = parse_input(f"@{tmp_path / 'b.json'}")
    assert name == "" and array.tolist() == [[1, 2], [3, 4]]
    assert parse_input("[[0.5]]")[0] == "" and parse_input("ids=[1, 2]")[1].tolist() == [1, 2]
    assert conform(np.ones(2), "FP32", "x").dtype == np.float32
    assert conform(np.asarray([1, 2]), "FP32", "x").dtype == np.float32
    assert conform(np.asarray([1, 2]), "INT32", "x").dtype == np.int32
    with pytest.raises(ConfigError, match="do not convert to the model's INT64"):
        conform(np.asarray([0.5]), "INT64", "input 'x'")
    with pytest.raises(ConfigError, match="do not convert"):
        conform(np.asarray([300]), "UINT8", "input 'x'")
    for bad, message in ((f"x=@{tmp_path / 'none.npy'}", "cannot read"), ("x=[[1], [2, 3]]", "rectangular"),
                         ("x=[1, 2", "not valid JSON"), ('x=["a"]', "numbers")):
        with pytest.raises(ConfigError, match=message):
            parse_input(bad)


@pytest.mark.parametrize("args, flag", [
    (["models", "export", "--model", "m"], "--job / --checkpoint"),
    (["models", "export", "--model", "m", "--job", "j", "--checkpoint", "c"], "--job / --checkpoint"),
    (["models", "export", "--model", "m", "--checkpoint", "c"], "--builder"),
    (["models", "export", "--model", "m", "--job", "j", "--config", "{x"], "--config"),
    (["models", "export", "--model", "m", "--job", "j", "--format", "tflite"], "--format"),
    (["deployments", "create", "d", "--model", "m"], "--version / --traffic"),
    (["deployments", "create", "d", "--model", "m", "--traffic", "1=90,2=20"], "--traffic"),
    (["deployments", "create", "d", "--model", "m", "--version", "1", "--cpus", "nan"], "--cpus"),
    (["deployments", "create", "d", "--model", "m", "--version", "1", "--replicas", "2", "--max-replicas", "3"],
     "--replicas"),
    (["deployments", "create", "d", "--model", "m", "--version", "1", "--backend", "tensorrt"], "--backend"),
    (["deployments", "update", "d"], "--traffic"),
    (["models", "export", "--model", "m", "--job", "j", "--dynamic-sizes", "16,-4"], "--dynamic-sizes"),
    (["models", "export", "--model", "m", "--job", "j", "--dynamic-sizes", "wide"], "--dynamic-sizes"),
    (["export", "--model", "m"], "--job / --checkpoint"),  # the top-level shortcuts
    (["deploy", "d", "--model", "m"], "--version / --traffic"),
    (["predict", "m", "--input", "x=@/no/such/file.npy"], "--input"),
    (["predict", "m", "--input", "x=[1]", "--input", "x=[2]"], "--input"),
])
def test_usage_mistakes_name_their_flag_before_dialling(args, flag):
    result = Cli(f"127.0.0.1:{free_port()}")(*args)
    assert result.exit_code == ExitCode.USAGE, result.stdout + result.stderr
    assert flag in result.stderr and "Traceback" not in result.stderr


def test_an_unreachable_exporter_is_a_connection_error():
    result = Cli(f"127.0.0.1:{free_port()}", "--request-timeout", "2")("models", "list")
    assert result.exit_code == ExitCode.UNREACHABLE, result.stdout + result.stderr
    assert result.stderr.startswith("error: cannot reach 127.0.0.1:") and "Traceback" not in result.stderr


def test_export_inputs_parse_from_name_dtype_shape_and_bad_ones_name_the_flag():
    from paddleray.services.client.exporter import tensor_spec

    spec = tensor_spec("x:fp32:-1,64")
    assert (spec.name, spec.datatype, list(spec.shape)) == ("x", model_pb2.DATA_TYPE_FP32, [-1, 64])
    assert list(tensor_spec("ids:INT64:-1").shape) == [-1]
    for bad, why in (("x:FP32", "NAME:DTYPE:SHAPE"), ("x:FP99:-1,8", "is not one of"), ("x:FP32:-1,a", "integers")):
        with pytest.raises(ConfigError, match=why):
            tensor_spec(bad)
    cli = Cli(f"127.0.0.1:{free_port()}")
    result = cli("models", "export", "--model", "m", "--job", "j", "--input", "x:FP32:any")
    assert result.exit_code == ExitCode.USAGE and "--input" in result.stderr and "x:FP32:any" in result.stderr


def test_an_address_that_is_not_an_exporter_says_so_and_names_the_option():
    from concurrent import futures

    import grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))  # serves nothing: as a scheduler serves no models
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        result = Cli(f"127.0.0.1:{port}")("models", "list")
    finally:
        server.stop(0)
    assert result.exit_code == ExitCode.REJECTED
    assert f"127.0.0.1:{port} is not an exporter" in result.stderr and "--exporter-address" in result.stderr


def test_a_max_batch_size_of_zero_is_a_usage_error_naming_the_flag():
    result = Cli(f"127.0.0.1:{free_port()}")("deployments", "create", "d", "--model", "m", "--version", "1",
                                              "--max-batch-size", "0")
    assert result.exit_code == ExitCode.USAGE and "--max-batch-size" in result.stderr
