"""User code of the multi-node tests: written as a user would, shipped by the tests, not the project.

`dp_digits`: data-parallel logistic regression on scikit-learn's digits with Paddle over the
run's collective (gloo on CPU), deterministic for a seed, so that any placement of the ranks
ends with the same loss. Each epoch sleeps `epoch_s` halfway (a window to kill a node in),
then rank 0 checkpoints the weights and the epoch; a run resumed from a checkpoint starts at the
next epoch. Reports per epoch: epoch, loss, started_at_epoch, and `node` (the Ray node id of
the reporting rank 0, for the test to see where ranks ran).

`hold`: reports once, then holds its CPUs until stopped (to fill a node).
"""

from __future__ import annotations

import json
import time


def dp_digits(config, ctx):
    import numpy as np
    import paddle
    import paddle.distributed as dist
    import ray
    from sklearn.datasets import load_digits

    paddle.seed(0)
    digits = load_digits()
    x = (digits.data / 16.0).astype("float32")
    y = digits.target.astype("int64")
    model = paddle.nn.Linear(64, 10)
    optimizer = paddle.optimizer.SGD(learning_rate=0.5, parameters=model.parameters())
    start = 1
    if ctx.latest_checkpoint is not None:
        state = json.loads((ctx.latest_checkpoint / "state.json").read_text())
        model.set_state_dict({k: paddle.to_tensor(np.asarray(v, dtype="float32")) for k, v in state["weights"].items()})
        start = state["epoch"] + 1
    mine = np.arange(ctx.rank, len(y), ctx.world_size)
    half = len(mine) // 2
    for epoch in range(start, int(config["epochs"]) + 1):
        losses = []
        for part, rows in enumerate((mine[:half], mine[half:])):
            if part == 1:
                time.sleep(float(config.get("epoch_s", 0.0)))
            loss = paddle.nn.functional.cross_entropy(model(paddle.to_tensor(x[rows])), paddle.to_tensor(y[rows]))
            loss.backward()
            for parameter in model.parameters():  # the mean gradient over the ranks
                if ctx.world_size > 1:
                    dist.all_reduce(parameter.grad)
                    parameter.grad.set_value(parameter.grad / ctx.world_size)
            optimizer.step()
            optimizer.clear_grad()
            total = paddle.to_tensor(float(loss))
            if ctx.world_size > 1:
                dist.all_reduce(total)
            losses.append(float(total.item()) / ctx.world_size)
        checkpoint = None
        if ctx.rank == 0:
            checkpoint = ctx.make_checkpoint_dir()
            weights = {k: v.numpy().tolist() for k, v in model.state_dict().items()}
            (checkpoint / "state.json").write_text(json.dumps({"epoch": epoch, "weights": weights}))
        ctx.report({"epoch": epoch, "loss": losses[-1], "started_at_epoch": start,
                    "node": _node_number(ray.get_runtime_context().get_node_id())}, checkpoint=checkpoint)


def _node_number(node_id: str) -> float:
    """A node id as a metric (metrics are numbers): its first 12 hex digits."""
    return float(int(node_id[:12], 16))


def hold(config, ctx):
    ctx.report({"holding": 1.0})
    while not ctx.should_stop():
        time.sleep(0.1)
