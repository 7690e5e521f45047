"""PaddleBackend's arithmetic and the GPU path, checked without a GPU (fake Ray assignments)."""

from __future__ import annotations

import subprocess

import grpc
import pytest

from paddleray.services.common import errors
from paddleray.services.common.gpu_env import gpu_memory_limit_mb, gpu_process_env, probe_gpu_memory_mb
from paddleray.services.trainer.backend import (
    MATH_THREAD_VARS,
    PaddleBackendConfig,
    collective_env,
    math_thread_env,
    validate_gpu_request,
)
from paddleray.services.trainer.spec import EnvSpec, GroupSpec, WorkerResources
from paddleray.services.trainer.worker_group import actor_options, bundle, local_ranks

pytestmark = pytest.mark.unit

ENDPOINTS = ["10.0.0.1:6001", "10.0.0.1:6002", "10.0.0.2:6003"]


def test_cpu_ranks_get_gloo_and_their_own_endpoint():
    env = collective_env(1, ENDPOINTS, PaddleBackendConfig(use_gpu=False))
    assert env["PADDLE_DISTRI_BACKEND"] == "gloo"
    assert env["PADDLE_TRAINER_ID"] == "1"
    assert env["PADDLE_TRAINERS_NUM"] == "3"
    assert env["PADDLE_TRAINER_ENDPOINTS"] == ",".join(ENDPOINTS)
    assert env["PADDLE_CURRENT_ENDPOINT"] == "10.0.0.1:6002"
    assert env["PADDLE_MASTER"] == "10.0.0.1:6001"
    assert "FLAGS_selected_gpus" not in env


def test_gpu_ranks_get_nccl_and_device_zero():
    config = PaddleBackendConfig(use_gpu=True)
    env = collective_env(2, ENDPOINTS, config)
    assert env["PADDLE_DISTRI_BACKEND"] == "nccl"
    assert env["FLAGS_selected_gpus"] == "0"
    assert config.device == "gpu:0" and PaddleBackendConfig().device == "cpu"


def test_each_worker_sees_only_its_ray_gpu_as_device_zero():
    # Ray assigned physical GPU 3 to this worker.
    env = gpu_process_env(1, ["3"], total_memory_mb=None)
    assert env == {"CUDA_VISIBLE_DEVICES": "3", "FLAGS_selected_gpus": "0"}
    two = gpu_process_env(2, [4, 5], total_memory_mb=None)
    assert two["CUDA_VISIBLE_DEVICES"] == "4,5" and two["FLAGS_selected_gpus"] == "0"
    assert gpu_process_env(0, [], None) == {}


def test_a_fraction_of_a_gpu_caps_the_workers_memory():
    env = gpu_process_env(0.25, ["1"], total_memory_mb=16_000)
    assert env["FLAGS_gpu_memory_limit_mb"] == "4000"
    assert env["FLAGS_fraction_of_gpu_memory_to_use"] == "0.2500"
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    # Two trials at 0.5 on a 24 GiB card never ask for more than the card together.
    assert 2 * gpu_memory_limit_mb(0.5, 24_576) <= 24_576
    assert gpu_memory_limit_mb(1 / 3, 16_000) == 5333
    # Unknown card size: the fraction flag still bounds the first allocation.
    assert "FLAGS_gpu_memory_limit_mb" not in gpu_process_env(0.5, ["0"], None)


def test_gpu_memory_is_probed_with_nvidia_smi():
    calls = []

    def fake_run(args, **kwargs):
        calls.append(args)
        return subprocess.CompletedProcess(args, 0, stdout="16384\n")

    assert probe_gpu_memory_mb("2", run=fake_run) == 16384
    assert "--id=2" in calls[0]

    def failing(args, **kwargs):
        raise subprocess.CalledProcessError(9, args)

    assert probe_gpu_memory_mb("0", run=failing) is None


@pytest.mark.parametrize("num_gpus,num_workers", [(0.5, 2), (0.25, 8)])
def test_fractional_gpus_are_rejected_for_multi_worker_runs(num_gpus, num_workers):
    with pytest.raises(errors.InvalidArgument) as raised:
        validate_gpu_request(num_gpus, num_workers)
    assert raised.value.field == "spec.resources_per_worker.num_gpus"
    assert "num_workers = 1" in raised.value.rule
    assert raised.value.code == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize("num_gpus,num_workers", [(0.5, 1), (1, 4), (2, 2), (0, 8)])
def test_whole_gpus_and_single_worker_fractions_are_allowed(num_gpus, num_workers):
    validate_gpu_request(num_gpus, num_workers)


@pytest.mark.parametrize("num_gpus", [1.5, -1, float("nan")])
def test_other_gpu_amounts_are_rejected(num_gpus):
    with pytest.raises(errors.InvalidArgument):
        validate_gpu_request(num_gpus, 1)


def test_resources_asked_of_ray_for_a_gpu_worker():
    spec = GroupSpec(
        num_workers=1,
        resources=WorkerResources(num_cpus=2, num_gpus=0.5, memory_bytes=1 << 30, custom=(("node-a100", 0.01),)),
        env=EnvSpec(image="registry.local/paddleray-gpu:3.3.1", env_vars=(("A", "1"),)),
        strategy="STRICT_PACK",
    )
    assert bundle(spec.resources) == {"CPU": 2, "GPU": 0.5, "memory": float(1 << 30), "node-a100": 0.01}
    options = actor_options(spec, None, 0)
    assert options["num_gpus"] == 0.5 and options["num_cpus"] == 2
    assert options["memory"] == 1 << 30 and options["resources"] == {"node-a100": 0.01}
    assert options["runtime_env"] == {"env_vars": {"A": "1"}, "image_uri": "registry.local/paddleray-gpu:3.3.1"}
    assert options["max_restarts"] == 0


def test_cpu_bundles_leave_out_what_is_not_asked():
    assert bundle(WorkerResources(num_cpus=1)) == {"CPU": 1}


def test_local_ranks_count_per_node():
    assert local_ranks(["a", "a", "b", "a", "b"]) == [0, 1, 0, 2, 1]


def test_a_worker_given_half_a_gpu_sets_paddles_flags_before_importing_it(monkeypatch):
    import builtins
    import os

    from paddleray.services.trainer import worker

    for key in ("CUDA_VISIBLE_DEVICES", "FLAGS_selected_gpus", "FLAGS_gpu_memory_limit_mb", "FLAGS_fraction_of_gpu_memory_to_use"):
        monkeypatch.setenv(key, "unset")  # restored after the test
    monkeypatch.setattr(worker.ray, "get_gpu_ids", lambda: ["3"])  # what Ray assigned
    monkeypatch.setattr(worker, "probe_gpu_memory_mb", lambda device: 16_000 if device == "3" else None)
    seen_at_import = {}
    real_import = builtins.__import__

    def recording_import(name, *args, **kwargs):
        if name == "paddle" and not seen_at_import:
            seen_at_import.update({k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES", "FLAGS_gpu_memory_limit_mb")})
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", recording_import)
    worker.WorkerActor(num_gpus=0.5)
    assert seen_at_import == {"CUDA_VISIBLE_DEVICES": "3", "FLAGS_gpu_memory_limit_mb": "8000"}
    assert os.environ["FLAGS_selected_gpus"] == "0"
    assert os.environ["FLAGS_fraction_of_gpu_memory_to_use"] == "0.5000"


def test_math_libraries_follow_the_thread_count_ray_gives_the_worker():
    assert math_thread_env({"OMP_NUM_THREADS": "1"}) == dict.fromkeys(MATH_THREAD_VARS, "1")
    assert math_thread_env({"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "4"})["MKL_NUM_THREADS"] == "4"
    assert math_thread_env({}) == {}
