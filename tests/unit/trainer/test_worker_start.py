"""What a worker process pays to start: which env goes through Ray's runtime_env, what it imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from paddleray.services.trainer import worker
from paddleray.services.trainer.spec import EnvSpec, GroupSpec
from paddleray.services.trainer.worker_group import actor_options, split_env

pytestmark = pytest.mark.unit


def test_env_vars_alone_are_set_by_the_worker_not_by_a_ray_runtime_env():
    env = EnvSpec(env_vars=(("PYTHONPATH", "/code"), ("GLOG_v", "0"), ("FLAGS_x", "1")))
    assert split_env(env) == ({}, {"PYTHONPATH": "/code", "GLOG_v": "0", "FLAGS_x": "1"})
    assert actor_options(GroupSpec(env=env), None, 0)["runtime_env"] is None


@pytest.mark.parametrize("env", [
    EnvSpec(env_vars=(("A", "1"), ("LD_PRELOAD", "/lib/x.so"))),
    EnvSpec(env_vars=(("PYTHONHASHSEED", "0"),)),
    EnvSpec(env_vars=(("RAY_BACKEND_LOG_LEVEL", "debug"),)),
    EnvSpec(env_vars=(("CUDA_VISIBLE_DEVICES", "1"),)),
    EnvSpec(env_vars=(("MALLOC_ARENA_MAX", "2"),)),
    EnvSpec(working_dir="/code", env_vars=(("A", "1"),)),
    EnvSpec(image="registry.local/paddleray:3", env_vars=(("A", "1"),)),
])
def test_an_env_that_must_exist_at_process_start_goes_through_ray_whole(env):
    runtime_env, in_worker = split_env(env)
    assert runtime_env == env.to_ray() and in_worker == {}


def test_no_env_is_no_runtime_env():
    assert split_env(EnvSpec()) == ({}, {})


def test_the_worker_sets_env_vars_as_ray_would(monkeypatch):
    monkeypatch.setenv("BASE", "/base")
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    monkeypatch.setattr(sys, "path", ["/script-dir", "/stdlib", "/already", "/site-packages"])
    monkeypatch.delenv("RUN_A", raising=False)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    worker.apply_env({"RUN_A": "${BASE}/bin:${NOT_SET_ANYWHERE}x", "PYTHONPATH": "/code:/already::/code"})
    assert os.environ["RUN_A"] == "/base/bin:x"
    assert os.environ["PYTHONPATH"] == "/code:/already::/code"
    assert sys.path == ["/script-dir", "/code", "/already", "/stdlib", "/site-packages"]


def test_importing_the_worker_module_imports_no_framework():
    """A Ray worker process imports this module (the actor's class) before anything of a run: what
    it imports every run's process pays, and a tiny function needs none of Paddle, NumPy, Arrow."""
    heavy = ["paddle", "numpy", "pyarrow", "pandas", "ray.train", "ray.tune", "ray.data", "ray.serve"]
    code = ("import json, sys; import paddleray.services.trainer.worker; "
            f"print(json.dumps([m for m in {heavy!r} if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


class _Method:
    def __init__(self, calls: list, name: str) -> None:
        self.calls, self.name = calls, name

    async def _done(self) -> None:
        return None

    def remote(self, *args):
        self.calls.append((self.name, args))
        return self._done()


class _FakeWorker:
    def __init__(self) -> None:
        self.calls: list = []
        self.set_device = _Method(self.calls, "set_device")


@pytest.mark.parametrize("use_gpu,expected", [(False, []), (True, [("set_device", ("gpu:0",))])])
async def test_a_single_rank_is_called_at_start_only_to_put_it_on_a_gpu(use_gpu, expected):
    from paddleray.services.trainer.backend import PaddleBackend, PaddleBackendConfig

    rank = _FakeWorker()
    await PaddleBackend(PaddleBackendConfig(use_gpu=use_gpu)).on_start([rank])
    assert rank.calls == expected
