"""User functions the trainer's integration tests run on Ray workers.

The tests put this directory on the workers' PYTHONPATH (runtime_env env_vars) and allowlist
the module. Each function is small: the shared test Ray head has 2 CPUs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def hello(config, ctx):
    print(f"hello from rank {ctx.rank} of {ctx.world_size}")
    print(f"warning on rank {ctx.rank}", file=sys.stderr)
    for i in range(int(config.get("lines", 3))):
        print(f"line {i} rank {ctx.rank}")
    ctx.report({"value": float(ctx.rank) + 1.0, "samples_per_s": 100.0})
    time.sleep(float(config.get("linger_s", 0)))


def raises(config, ctx):
    raise ValueError("learning rate must be positive")


def wait_for_stop(config, ctx):
    print("waiting for a stop", flush=True)
    while not ctx.should_stop():
        time.sleep(0.05)
    ctx.report({"stopped_gracefully": 1.0})


def ignore_stop(config, ctx):
    print("ignoring stops", flush=True)
    time.sleep(3600)


def dp_gradients(config, ctx):
    """Each rank computes a gradient on its own data, alone and under DataParallel."""
    import paddle

    paddle.seed(0)
    local = paddle.nn.Linear(4, 1)
    model = paddle.DataParallel(paddle.nn.Linear(4, 1))
    model._layers.set_state_dict(local.state_dict())
    x = paddle.to_tensor([[1.0, 2.0, 3.0, 4.0]]) * (ctx.rank + 1) ** 2
    y = paddle.to_tensor([[float(ctx.rank * 10)]])
    loss_local = ((local(x) - y) ** 2).mean()
    loss_local.backward()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    result = {
        "local": local.weight.grad.numpy().ravel().tolist(),
        "dp": model._layers.weight.grad.numpy().ravel().tolist(),
    }
    Path(config["out_dir"], f"rank-{ctx.rank}.json").write_text(json.dumps(result))
    ctx.report({"loss": float(loss)})


def rank_dies(config, ctx):
    """Rank 1 exits after the first all_reduce; rank 0 waits in the second."""
    import paddle
    import paddle.distributed as dist

    value = paddle.to_tensor([1.0])
    dist.all_reduce(value)
    ctx.report({"first_all_reduce": float(value.numpy()[0])})
    if ctx.rank == 1:
        os._exit(3)
    dist.all_reduce(value)  # never completes: its peer is gone
    time.sleep(3600)


def epochs(config, ctx):
    """A tiny regression trained epoch by epoch, checkpointed each epoch, resumable exactly."""
    import numpy as np
    import paddle

    paddle.seed(1)
    model = paddle.nn.Linear(3, 1)
    optimizer = paddle.optimizer.Adam(learning_rate=0.05, parameters=model.parameters())
    start = 1
    if ctx.latest_checkpoint is not None:
        model.set_state_dict(paddle.load(str(ctx.latest_checkpoint / "model.pdparams")))
        optimizer.set_state_dict(paddle.load(str(ctx.latest_checkpoint / "opt.pdopt")))
        start = ctx.checkpoint_manifest["epoch"] + 1
    print(f"starting at epoch {start}", flush=True)
    for epoch in range(start, int(config["epochs"]) + 1):
        if epoch == config.get("crash_at_epoch"):
            os._exit(1)  # the process dies in the middle of this epoch
        rng = np.random.default_rng(epoch)
        x = paddle.to_tensor(rng.normal(size=(32, 3)).astype("float32"))
        y = x.sum(axis=1, keepdim=True) * 2.0
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        directory = ctx.make_checkpoint_dir()
        paddle.save(model.state_dict(), str(directory / "model.pdparams"))
        paddle.save(optimizer.state_dict(), str(directory / "opt.pdopt"))
        ctx.report({"epoch": epoch, "loss": float(loss)}, checkpoint=directory)
        time.sleep(float(config.get("epoch_sleep_s", 0)))
    weights = model.weight.numpy().ravel().tolist() + model.bias.numpy().ravel().tolist()
    Path(config["out_dir"], f"{ctx.run_name.split('/')[-1]}.json").write_text(json.dumps(weights))


def imports_paddle(config, ctx):
    """Whether Paddle was imported before this code ran, then a computation with it."""
    imported_before = "paddle" in sys.modules
    import paddle

    total = float(paddle.to_tensor([1.0, 2.0]).sum())
    ctx.report({"paddle_before_call": float(imported_before), "sum": total,
                "on_cpu": float(paddle.get_device() == "cpu"), "gpus_visible": float(bool(os.environ.get("CUDA_VISIBLE_DEVICES")))})


def env_seen(config, ctx):
    """The env vars the run asked for as the rank sees them, and whether Ray started its process
    with a runtime env (which costs a setup_worker shim process per worker)."""
    import ray

    ctx.report({"flag": float(os.environ.get("RUN_FLAG", "nan")),
                "expanded": float(os.environ.get("RUN_EXPANDED", "").endswith(":tail")),
                "ray_runtime_env": float(bool(ray.get_runtime_context().runtime_env)),
                "worker_code_first": float(sys.path.index(str(Path(__file__).parent)) == 1)})


def serialization_addons(config, ctx):
    """Whether Ray's serialization addons' modules were imported before this code ran, and
    whether Ray's arrow serializer is registered once the code imports pyarrow."""
    before = {name: float(name in sys.modules) for name in ("numpy", "pyarrow", "pydantic", "starlette")}
    import pyarrow
    import ray.cloudpickle

    ctx.report({**{f"{name}_before": value for name, value in before.items()},
                "arrow_serializer_after": float(pyarrow.Table in ray.cloudpickle.CloudPickler.dispatch)})
