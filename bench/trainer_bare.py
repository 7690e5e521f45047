"""The bare-Paddle baseline of `python -m bench trainer`: one process, no Ray, no paddleray.

Trains the same model (the example's build_model), on the same rows, with the same batch
order, epochs, per-epoch evaluation and per-epoch checkpoint (model + optimizer) as the
digits example does under paddleray, written the way a Paddle user would write it. Prints one
JSON line: the seconds the training function took and the samples it trained, for its first
(cold) and its second (warm) call in the process.

    python -m bench.trainer_bare '{"model": "digits_mlp", "epochs": 5, "batch_size": 32}'
"""

from __future__ import annotations

import importlib
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import paddle
import paddle.nn.functional as F

from paddleray.services.trainer.examples.digits_data import load_split


def train(config: dict, out_dir: Path) -> dict:
    example = importlib.import_module(f"paddleray.services.trainer.examples.{config['model']}")
    shape = [-1, *example.INPUT_SHAPE]
    epochs, batch_size, seed = int(config["epochs"]), int(config["batch_size"]), int(config.get("seed", 0))
    started = time.perf_counter()
    data = load_split(0.2, seed)
    x, y = data["train"]
    vx, vy = paddle.to_tensor(data["validation"][0]).reshape(shape), paddle.to_tensor(data["validation"][1])
    paddle.seed(seed)
    model = example.build_model(config)
    optimizer = paddle.optimizer.Adam(learning_rate=float(config.get("lr", 0.01)), parameters=model.parameters())
    samples, losses = 0, []
    for epoch in range(epochs):
        order = np.random.default_rng([seed, epoch]).permutation(len(y))
        for step in range(len(y) // batch_size):
            rows = order[step * batch_size:(step + 1) * batch_size]
            loss = F.cross_entropy(model(paddle.to_tensor(x[rows]).reshape(shape)), paddle.to_tensor(y[rows]))
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
            samples += len(rows)
            losses.append(float(loss))
        model.eval()
        with paddle.no_grad():
            accuracy = float((model(vx).argmax(axis=1) == vy).astype("float32").mean())
        model.train()
        paddle.save(model.state_dict(), str(out_dir / f"epoch-{epoch}.pdparams"))
        paddle.save(optimizer.state_dict(), str(out_dir / f"epoch-{epoch}.pdopt"))
    return {
        "elapsed_s": time.perf_counter() - started, "samples": samples,
        "accuracy": accuracy, "last_epoch_loss": float(np.mean(losses[-(len(y) // batch_size):])),
    }


if __name__ == "__main__":
    # Twice: the first call in a fresh process also pays Paddle's one-off start (first kernels,
    # allocator), the second trains as a warm process does. Both are reported.
    with tempfile.TemporaryDirectory() as out:
        cold = train(json.loads(sys.argv[1]), Path(out))
        warm = train(json.loads(sys.argv[1]), Path(out))
    print(json.dumps({"cold": cold, "warm": warm}), flush=True)
