"""A user's own training function, written against docs/your-code.md: `train(config, ctx)`.

Resumes from ctx.latest_checkpoint (its own job's progress, after a failed attempt), else
starts from ctx.init_checkpoint (a baseline's weights) when the job has init_from.
"""

from __future__ import annotations

import json

import numpy as np
import paddle
import paddle.nn.functional as F

from my_trainer.model import build_model, make_data


def _load(directory, model, optimizer=None) -> int:
    model.set_state_dict(paddle.load(str(directory / "model.pdparams")))
    if optimizer is not None:
        optimizer.set_state_dict(paddle.load(str(directory / "optimizer.pdopt")))
    return json.loads((directory / "state.json").read_text())["epoch"]


def _loss(model, x, y) -> float:
    with paddle.no_grad():
        return float(F.cross_entropy(model(paddle.to_tensor(x)), paddle.to_tensor(y)))


def train(config, ctx):
    epochs, batch = int(config["epochs"]), int(config.get("batch_size", 32))
    paddle.seed(int(config.get("seed", 0)))
    with paddle.utils.unique_name.guard():  # the same parameter names in a reused worker
        model = build_model(int(config.get("hidden", 16)))
        optimizer = paddle.optimizer.Adam(learning_rate=float(config.get("lr", 0.01)), parameters=model.parameters())
    x, y = make_data(256, seed=7)
    start_epoch, initialized_from = 0, -1.0
    if ctx.latest_checkpoint is not None:
        start_epoch = _load(ctx.latest_checkpoint, model, optimizer)
    elif ctx.init_checkpoint is not None:
        initialized_from = float(_load(ctx.init_checkpoint, model))
    loss_before = _loss(model, x, y)
    net = paddle.DataParallel(model) if ctx.world_size > 1 else model
    rows = np.asarray(ctx.shard(np.arange(len(y))))
    print(f"rank {ctx.rank}/{ctx.world_size}: epochs {start_epoch + 1}..{epochs}", flush=True)
    for epoch in range(start_epoch, epochs):
        if epoch + 1 == config.get("fail_at_epoch") and start_epoch == 0:
            raise RuntimeError(f"injected failure at epoch {epoch + 1}")
        for start in range(0, len(rows), batch):
            part = rows[start:start + batch]
            loss = F.cross_entropy(net(paddle.to_tensor(x[part])), paddle.to_tensor(y[part]))
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
        metrics = {
            "epoch": epoch + 1, "loss": _loss(model, x, y), "loss_before": loss_before, "world_size": ctx.world_size,
            "started_at_epoch": start_epoch + 1, "initialized_from_epoch": initialized_from,
        }
        checkpoint = None
        if ctx.rank == 0:
            checkpoint = ctx.make_checkpoint_dir()
            paddle.save(model.state_dict(), str(checkpoint / "model.pdparams"))
            paddle.save(optimizer.state_dict(), str(checkpoint / "optimizer.pdopt"))
            (checkpoint / "state.json").write_text(json.dumps({"epoch": epoch + 1}))
        ctx.report(metrics, checkpoint=checkpoint)
