"""The training loop both digits examples share: data parallel, per-epoch checkpoints, exact resume.

Same results at any world size: `batch_size` is the global batch. Each epoch shuffles the
train rows with a permutation seeded by (seed, epoch), identical on every rank; rank r takes
`ctx.shard(permutation)` (every world_size-th row from r) and steps through it in slices of
batch_size / world_size, so step s of all ranks together covers exactly the rows a single
worker would use at step s, and DataParallel's gradient average equals the single worker's
gradient. The trailing partial global batch is dropped so that every rank takes the same
number of steps (a rank with one extra step would wait forever in the gradient all-reduce).

Exact resume: a checkpoint holds the model's and the optimizer's state and the number of
epochs done; the permutation of an epoch depends only on (seed, epoch), so a resumed run
repeats nothing and skips nothing (`fail_once_after_epoch` lets a user see it: the job's first
attempt raises after that epoch, and its retry resumes there). Fine-tuning (spec.init_from, ctx.init_checkpoint) loads only
the baseline's weights, and only when the run has no checkpoint of its own to resume from.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from paddleray.services.trainer.examples import digits_data
from paddleray.services.trainer.examples.config import TrainConfig

MODEL_FILE = "model.pdparams"
OPTIMIZER_FILE = "optimizer.pdopt"
STATE_FILE = "train_state.json"

Batches = Callable[[int], Iterator[tuple[np.ndarray, np.ndarray]]]


def make_optimizer(cfg: TrainConfig, parameters):
    import paddle

    decay = cfg.weight_decay or None
    if cfg.optimizer == "adam":
        return paddle.optimizer.Adam(learning_rate=cfg.lr, parameters=parameters, weight_decay=decay)
    if cfg.optimizer == "momentum":
        return paddle.optimizer.Momentum(
            learning_rate=cfg.lr, momentum=cfg.momentum, parameters=parameters, weight_decay=decay
        )
    return paddle.optimizer.SGD(learning_rate=cfg.lr, parameters=parameters, weight_decay=decay)


def save_checkpoint(directory: Path, model, optimizer, epochs_done: int, config: dict[str, Any], model_name: str) -> Path:
    """Writes what resume and the exporter need: weights, optimizer state, epochs done, config."""
    import paddle

    paddle.save(model.state_dict(), str(directory / MODEL_FILE))
    paddle.save(optimizer.state_dict(), str(directory / OPTIMIZER_FILE))
    state = {"epoch": epochs_done, "model": model_name, "config": config}
    (directory / STATE_FILE).write_text(json.dumps(state, sort_keys=True))
    return directory


def load_checkpoint(directory: str | Path, model, optimizer=None) -> dict[str, Any]:
    """Restores weights (and the optimizer's state when given); returns the saved train state."""
    import paddle

    directory = Path(directory)
    model.set_state_dict(paddle.load(str(directory / MODEL_FILE)))
    if optimizer is not None:
        optimizer.set_state_dict(paddle.load(str(directory / OPTIMIZER_FILE)))
    return json.loads((directory / STATE_FILE).read_text())


def load_weights(directory: str | Path, model) -> None:
    """The weights of a checkpoint these examples wrote (spec.init_from: a job or a checkpoint)."""
    import paddle

    weights = Path(directory) / MODEL_FILE
    if not weights.is_file():
        raise ValueError(
            f"init_from: {directory} has no {MODEL_FILE}; the examples fine-tune from a checkpoint of a job that "
            "ran them (init_from.job or init_from.checkpoint_uri), not from an exported static graph"
        )
    model.set_state_dict(paddle.load(str(weights)))


def all_reduce_sum(values: list[float], world_size: int) -> list[float]:
    if world_size == 1:
        return values
    import paddle
    import paddle.distributed as dist

    tensor = paddle.to_tensor(values, dtype="float64")
    dist.all_reduce(tensor)
    return tensor.numpy().tolist()


def share_rank0_state(model, world_size: int) -> None:
    """Rank 0's non-trainable state (BatchNorm's running mean and variance) on every rank.

    DataParallel averages gradients, so trainable weights agree across ranks, but each rank's
    running statistics follow its own batches: without this the ranks validate models that
    differ from each other and from the one rank 0 checkpoints, and a resumed run (every rank
    loading rank 0's) validates otherwise than an uninterrupted one (seen: the CRNN's val_loss
    0.04438 retried vs 0.04436 straight, its training loss the same to the bit). Called once an
    epoch, before validation and the checkpoint, as DistributedDataParallel's broadcast_buffers."""
    if world_size == 1:
        return
    import paddle.distributed as dist

    for tensor in model.state_dict().values():
        if not getattr(tensor, "trainable", False):
            dist.broadcast(tensor, src=0)


def stop_agreed(ctx) -> bool:
    """Whether to stop now. With several ranks, all must agree on the same step: a rank that
    leaves while the others enter the gradient all-reduce would leave them waiting until killed."""
    stop = bool(ctx.should_stop())
    if ctx.world_size == 1:
        return stop
    import paddle
    import paddle.distributed as dist

    flag = paddle.to_tensor([int(stop)], dtype="int32")
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def _dataset_shard(ctx, name: str):
    """This rank's iterator of a dataset named in the spec, or None when the run has none by that name."""
    try:
        return ctx.get_dataset_shard(name)
    except KeyError:
        return None


def _packaged_batches(ctx, x: np.ndarray, y: np.ndarray, cfg: TrainConfig, shuffle: bool) -> Batches:
    batch = cfg.per_rank_batch(ctx.world_size) if shuffle else cfg.eval_batch_size
    steps = len(y) // cfg.batch_size

    def batches(epoch: int):
        if shuffle:
            order = np.random.default_rng([cfg.seed, epoch]).permutation(len(y))
            mine = np.asarray(ctx.shard(order))
            for step in range(steps):
                rows = mine[step * batch:(step + 1) * batch]
                yield x[rows], y[rows]
        else:
            # Evaluation: every row once, spread over the ranks; sums are reduced afterwards.
            mine = np.asarray(ctx.shard(np.arange(len(y))))
            for start in range(0, len(mine), batch):
                rows = mine[start:start + batch]
                yield x[rows], y[rows]

    return batches


def _dataset_batches(iterator, batch_size: int, drop_last: bool) -> Batches:
    def batches(_epoch: int):
        for batch in iterator.iter_batches(batch_size=batch_size, batch_format="numpy", drop_last=drop_last):
            yield digits_data.decode_batch(batch)

    return batches


def data_sources(ctx, cfg: TrainConfig) -> tuple[Batches, Batches, str]:
    """(train batches, validation batches, description): datasets given to the run, else packaged digits."""
    per_rank = cfg.per_rank_batch(ctx.world_size)
    packaged = digits_data.load_split(cfg.validation_fraction, cfg.seed)
    train_shard, val_shard = _dataset_shard(ctx, "train"), _dataset_shard(ctx, "validation")
    if train_shard is not None:
        # streaming_split(equal=True) gives every rank as many rows; drop_last keeps the steps equal.
        train = _dataset_batches(train_shard, per_rank, drop_last=True)
    else:
        train = _packaged_batches(ctx, *packaged["train"], cfg, shuffle=True)
    if val_shard is not None:
        validation = _dataset_batches(val_shard, cfg.eval_batch_size, drop_last=False)
    else:
        validation = _packaged_batches(ctx, *packaged["validation"], cfg, shuffle=False)
    source = f"train={'dataset' if train_shard is not None else 'packaged'} " \
             f"validation={'dataset' if val_shard is not None else 'packaged'}"
    return train, validation, source


def validation_sums(model, batches: Batches, input_shape: tuple[int, ...]) -> list[float]:
    """[loss sum, correct, rows] over this rank's validation rows (reduced across ranks by the caller)."""
    import paddle
    import paddle.nn.functional as F

    model.eval()
    loss_sum = correct = count = 0.0
    with paddle.no_grad():
        for x, y in batches(0):
            if len(y) == 0:
                continue
            logits = model(paddle.to_tensor(x).reshape([-1, *input_shape]))
            labels = paddle.to_tensor(y)
            loss_sum += float(F.cross_entropy(logits, labels, reduction="sum"))
            correct += float((logits.argmax(axis=1) == labels).astype("float32").sum())
            count += len(y)
    model.train()
    return [loss_sum, correct, count]


def fit(config: dict[str, Any], ctx, build_model, input_shape: tuple[int, ...], model_name: str) -> dict[str, float]:
    """Trains build_model(config) on every rank; reports and checkpoints each epoch; returns the last metrics."""
    import paddle

    # The optimizer's saved state is keyed by parameter and accumulator names, which Paddle
    # draws from process-wide counters: a fresh name scope gives the same names in every run,
    # so a checkpoint loads into a process (a warm pool worker) that has built models before.
    with paddle.utils.unique_name.guard():
        return _fit(config, ctx, build_model, input_shape, model_name)


def _fit(config: dict[str, Any], ctx, build_model, input_shape: tuple[int, ...], model_name: str) -> dict[str, float]:
    import paddle
    import paddle.nn.functional as F

    cfg = TrainConfig.from_dict(config)
    paddle.seed(cfg.seed)
    model = build_model(config)
    optimizer = make_optimizer(cfg, model.parameters())
    first_epoch = 0
    resumed = ctx.latest_checkpoint is not None
    if resumed:
        first_epoch = load_checkpoint(ctx.latest_checkpoint, model, optimizer)["epoch"]
    elif ctx.init_checkpoint is not None:
        # Fine-tuning: the baseline's weights, a fresh optimizer, and this run's own epochs.
        load_weights(ctx.init_checkpoint, model)
        print(f"{model_name}: rank {ctx.rank} starts from the weights in {ctx.init_checkpoint}", flush=True)
    net = paddle.DataParallel(model) if ctx.world_size > 1 else model
    train_batches, val_batches, source = data_sources(ctx, cfg)
    print(f"{model_name}: rank {ctx.rank}/{ctx.world_size} epochs {first_epoch + 1}..{cfg.epochs} {source}", flush=True)

    metrics: dict[str, float] = {}
    steps_taken = 0  # the same on every rank: every rank takes as many steps an epoch
    for epoch in range(first_epoch, cfg.epochs):
        started = time.perf_counter()
        # Summed on the device: reading the loss back every step would wait for a GPU each time.
        loss_total, samples = paddle.zeros([], dtype="float32"), 0.0
        for step, (x, y) in enumerate(train_batches(epoch)):
            # Alone, a check is free; across ranks it is a collective, so only every few steps,
            # counted across epochs (an epoch of a few large steps needs no check of its own).
            if (ctx.world_size == 1 or steps_taken % cfg.stop_check_steps == 0) and stop_agreed(ctx):
                print(f"{model_name}: rank {ctx.rank} stops at epoch {epoch + 1} step {step}", flush=True)
                return metrics
            loss = F.cross_entropy(net(paddle.to_tensor(x).reshape([-1, *input_shape])), paddle.to_tensor(y))
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
            loss_total += loss.detach() * len(y)
            samples += len(y)
            steps_taken += 1
        elapsed = time.perf_counter() - started
        share_rank0_state(model, ctx.world_size)
        # One all-reduce an epoch for the training and the validation sums: ranks wait for
        # each other at every collective.
        loss_sum, samples, val_loss_sum, correct, val_rows = all_reduce_sum(
            [float(loss_total), float(samples), *validation_sums(model, val_batches, input_shape)], ctx.world_size
        )
        metrics = epoch_metrics(epoch, loss_sum, samples, val_loss_sum, correct, val_rows, elapsed)
        report_epoch(ctx, metrics, model, optimizer, config, model_name)
        fail_if_asked(cfg, epoch + 1, resumed)
    return metrics


class InjectedFailure(RuntimeError):
    """The fault config.fail_once_after_epoch asked for."""


def fail_if_asked(cfg: TrainConfig, epochs_done: int, resumed: bool) -> None:
    """Raises once epoch cfg.fail_once_after_epoch is reported and checkpointed, on an attempt
    that started from no checkpoint of its own (a job's first): its retry resumes after that
    epoch and runs on, so a job fails once. Every rank raises at the same point, so none is
    left waiting in a collective for a rank that left."""
    if cfg.fail_once_after_epoch and not resumed and epochs_done == cfg.fail_once_after_epoch:
        raise InjectedFailure(f"injected failure after epoch {epochs_done} (config.fail_once_after_epoch)")


def epoch_metrics(epoch: int, loss_sum: float, samples: float, val_loss_sum: float, correct: float,
                  val_rows: float, elapsed: float) -> dict[str, float]:
    """What every example reports after an epoch, from the sums reduced over the ranks."""
    return {
        "epoch": float(epoch + 1),
        "loss": loss_sum / max(samples, 1.0),
        "val_loss": val_loss_sum / max(val_rows, 1.0),
        "accuracy": correct / max(val_rows, 1.0),
        "samples": samples,
        "samples_per_s": samples / elapsed if elapsed > 0 else 0.0,
    }


def report_epoch(ctx, metrics: dict[str, float], model, optimizer, config: dict[str, Any], model_name: str) -> None:
    """Reports the epoch's metrics, with a checkpoint from rank 0 (every rank holds the same model)."""
    checkpoint = None
    if ctx.rank == 0:
        checkpoint = save_checkpoint(ctx.make_checkpoint_dir(), model, optimizer, int(metrics["epoch"]), config,
                                     model_name)
    ctx.report(metrics, checkpoint=checkpoint)
