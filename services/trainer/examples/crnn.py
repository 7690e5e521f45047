"""Entrypoint `paddleray.services.trainer.examples.crnn:train`: a PaddleOCR-style text-line recognizer.

Conv + BiLSTM + CTC loss (crnn_model.CRNN) on text lines rendered at run time with a CJK font
(text_lines.py), any width. Config (all optional):
- the training keys of examples.config.TrainConfig, with this model's defaults: epochs 15,
  batch_size 16 (global), lr 0.005, optimizer adam;
- `charset` (default text_lines.DEFAULT_CHARSET: digits and 年月日元), `min_chars` / `max_chars`
  (2 / 6 characters a line), `train_lines` (384), `validation_lines` (128), `font` (a font file;
  default: the first Debian CJK font installed, fonts-wqy-microhei);
- `channels` (the conv widths, default [8, 16, 32]), `hidden` (LSTM size each way, default 32).

Lines are generated from (seed, stream): train lines from stream 0, validation lines from
stream 1 (none of them a train line), `held_out` lines from stream 2 (none of either). Every
rank renders them all and trains on its share of each epoch's permutation (as the digits
examples). Each step's lines are right-padded with background to the widest of the rank's
batch plus 0-16 random columns, and CTC is computed over every time step, padding included:
the model learns that padding reads as nothing, so a client may pad lines of any widths into
one batch. Metrics each epoch: `loss` and `val_loss` (CTC per character), `accuracy` (validation
lines read exactly), `cer` (character error rate), `samples`, `samples_per_s`. Checkpoints and
resume: the layout and rules of loop.py beside it.

For the exporter: `build_model(config)`, `input_spec()` (x: float32 [-1, 1, 32, -1]) and
`export_metadata(config)` (the charset and how to decode, recorded on the model version).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from paddleray.services.trainer.examples import loop, text_lines
from paddleray.services.trainer.examples.config import TrainConfig, as_int, as_int_list

MODEL_NAME = "crnn"
TRAIN_DEFAULTS = {"epochs": 15, "batch_size": 16, "lr": 0.005}
TRAIN_STREAM, VALIDATION_STREAM, HELD_OUT_STREAM = 0, 1, 2
_MAX_EXTRA_PAD_STEPS = 4  # up to 16 background columns added to each training batch


@dataclass(frozen=True)
class LineConfig:
    charset: str
    font: str
    min_chars: int
    max_chars: int
    train_lines: int
    validation_lines: int
    seed: int

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> LineConfig:
        min_chars = as_int(config, "min_chars", 2, minimum=1)
        max_chars = as_int(config, "max_chars", 6, minimum=1)
        if max_chars < min_chars:
            raise ValueError(f"config.max_chars: must be >= min_chars ({min_chars}), got {max_chars}")
        font = config.get("font")
        if font is not None and not isinstance(font, str):
            raise ValueError(f"config.font: must be a path to a font file, got {font!r}")
        return cls(
            charset=text_lines.check_charset(config.get("charset", text_lines.DEFAULT_CHARSET)),
            font=text_lines.find_font(font),
            min_chars=min_chars, max_chars=max_chars,
            train_lines=as_int(config, "train_lines", 384, minimum=1),
            validation_lines=as_int(config, "validation_lines", 128, minimum=1),
            seed=as_int(config, "seed", 0),
        )

    def texts(self, count: int, stream: int, exclude=()) -> list[str]:
        return text_lines.random_texts(count, self.charset, (self.seed, stream), self.min_chars, self.max_chars, exclude)

    def lines(self, texts: list[str], stream: int) -> list[np.ndarray]:
        return text_lines.render_lines(texts, self.font, (self.seed, stream))


def splits(config: dict[str, Any]) -> dict[str, tuple[list[str], list[np.ndarray]]]:
    """{"train": (texts, lines), "validation": (texts, lines)}: the same on every rank and run."""
    lc = LineConfig.from_dict(config)
    train = lc.texts(lc.train_lines, TRAIN_STREAM)
    validation = lc.texts(lc.validation_lines, VALIDATION_STREAM, exclude=train)
    return {"train": (train, lc.lines(train, TRAIN_STREAM)),
            "validation": (validation, lc.lines(validation, VALIDATION_STREAM))}


def held_out(config: dict[str, Any], count: int) -> tuple[list[str], list[np.ndarray]]:
    """`count` rendered lines that a run with this config never trained or validated on."""
    lc = LineConfig.from_dict(config)
    seen = lc.texts(lc.train_lines, TRAIN_STREAM)
    seen += lc.texts(lc.validation_lines, VALIDATION_STREAM, exclude=seen)
    texts = lc.texts(count, HELD_OUT_STREAM, exclude=seen)
    return texts, lc.lines(texts, HELD_OUT_STREAM)


def build_model(config: dict[str, Any]):
    from paddleray.services.trainer.examples.crnn_model import CRNN

    charset = text_lines.check_charset(config.get("charset", text_lines.DEFAULT_CHARSET))
    channels = as_int_list(config, "channels", [8, 16, 32])
    if len(channels) != 3:
        raise ValueError(f"config.channels: must list 3 conv widths, got {channels!r}")
    return CRNN(len(charset) + 1, channels, as_int(config, "hidden", 32, minimum=1))


def input_spec():
    from paddle.static import InputSpec

    return [InputSpec([None, 1, text_lines.HEIGHT, None], "float32", "x")]


def export_metadata(config: dict[str, Any]) -> dict[str, Any]:
    """What a client needs to read the served output (probabilities (N, T, classes))."""
    return {
        "charset": text_lines.check_charset(config.get("charset", text_lines.DEFAULT_CHARSET)),
        "decoder": "ctc_greedy",
        "blank": text_lines.BLANK,
        "input": {"height": text_lines.HEIGHT, "width_step": text_lines.WIDTH_STEP, "ink": 1.0, "background": 0.0},
    }


def ctc_loss(logits, texts: list[str], charset: str, reduction: str = "mean"):
    """CTC over every time step of (N, T, classes) logits; "mean" is per target character,
    averaged over lines (Paddle's), "sum" the sum of those per-line figures."""
    import paddle
    import paddle.nn.functional as F

    labels, lengths = text_lines.encode(texts, charset)
    rows, steps = logits.shape[0], logits.shape[1]
    per_line = F.ctc_loss(logits.transpose([1, 0, 2]), paddle.to_tensor(labels), paddle.full([rows], steps, "int64"),
                          paddle.to_tensor(lengths), blank=text_lines.BLANK, reduction="none")
    per_char = per_line.reshape([-1]) / paddle.to_tensor(lengths.astype(np.float32))
    return per_char.mean() if reduction == "mean" else per_char.sum()


def train(config: dict[str, Any], ctx) -> dict[str, float]:
    import paddle

    # Parameter names come from process-wide counters: a fresh scope keeps a checkpoint's
    # optimizer state loadable on a warm worker (as loop.py).
    with paddle.utils.unique_name.guard():
        return _train(config, ctx)


def _train(config: dict[str, Any], ctx) -> dict[str, float]:
    import paddle

    cfg = TrainConfig.from_dict({**TRAIN_DEFAULTS, **config})
    lines_cfg = LineConfig.from_dict(config)
    per_rank = cfg.per_rank_batch(ctx.world_size)
    data = splits(config)
    paddle.seed(cfg.seed)
    model = build_model(config)
    optimizer = loop.make_optimizer(cfg, model.parameters())
    first_epoch = 0
    resumed = ctx.latest_checkpoint is not None
    if resumed:
        first_epoch = loop.load_checkpoint(ctx.latest_checkpoint, model, optimizer)["epoch"]
    elif ctx.init_checkpoint is not None:
        loop.load_weights(ctx.init_checkpoint, model)
        print(f"{MODEL_NAME}: rank {ctx.rank} starts from the weights in {ctx.init_checkpoint}", flush=True)
    net = paddle.DataParallel(model) if ctx.world_size > 1 else model
    texts, lines = data["train"]
    steps = len(texts) // cfg.batch_size
    print(f"{MODEL_NAME}: rank {ctx.rank}/{ctx.world_size} epochs {first_epoch + 1}..{cfg.epochs}, "
          f"{len(texts)} train / {len(data['validation'][0])} validation lines, charset {lines_cfg.charset!r}, "
          f"font {lines_cfg.font}", flush=True)

    metrics: dict[str, float] = {}
    steps_taken = 0
    for epoch in range(first_epoch, cfg.epochs):
        started = time.perf_counter()
        mine = np.asarray(ctx.shard(np.random.default_rng([cfg.seed, epoch]).permutation(len(texts))))
        padding = np.random.default_rng([cfg.seed, epoch, ctx.rank])
        loss_total, samples = paddle.zeros([], dtype="float32"), 0.0
        for step in range(steps):
            if (ctx.world_size == 1 or steps_taken % cfg.stop_check_steps == 0) and loop.stop_agreed(ctx):
                print(f"{MODEL_NAME}: rank {ctx.rank} stops at epoch {epoch + 1} step {step}", flush=True)
                return metrics
            rows = mine[step * per_rank:(step + 1) * per_rank]
            batch = [lines[r] for r in rows]
            extra = int(padding.integers(0, _MAX_EXTRA_PAD_STEPS + 1)) * text_lines.WIDTH_STEP
            x = text_lines.to_batch(batch, width=max(line.shape[-1] for line in batch) + extra)
            loss = ctc_loss(net(paddle.to_tensor(x)), [texts[r] for r in rows], lines_cfg.charset)
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
            loss_total += loss.detach() * len(rows)
            samples += len(rows)
            steps_taken += 1
        elapsed = time.perf_counter() - started
        loop.share_rank0_state(model, ctx.world_size)
        loss_sum, samples, val_loss_sum, correct, errors, chars, val_rows = loop.all_reduce_sum(
            [float(loss_total), samples, *validation_sums(model, *data["validation"], ctx, cfg, lines_cfg.charset)],
            ctx.world_size)
        metrics = loop.epoch_metrics(epoch, loss_sum, samples, val_loss_sum, correct, val_rows, elapsed)
        metrics["cer"] = errors / max(chars, 1.0)
        loop.report_epoch(ctx, metrics, model, optimizer, config, MODEL_NAME)
        loop.fail_if_asked(cfg, epoch + 1, resumed)
    return metrics


def validation_sums(model, texts: list[str], lines: list[np.ndarray], ctx, cfg: TrainConfig,
                    charset: str) -> list[float]:
    """[CTC loss sum, lines read exactly, character errors, characters, lines] over this rank's
    share of the validation lines (reduced across ranks by the caller)."""
    import paddle

    mine = np.asarray(ctx.shard(np.arange(len(texts))))
    loss_sum = correct = errors = chars = 0.0
    model.eval()
    with paddle.no_grad():
        for start in range(0, len(mine), cfg.eval_batch_size):
            rows = mine[start:start + cfg.eval_batch_size]
            logits = model.logits(paddle.to_tensor(text_lines.to_batch([lines[r] for r in rows])))
            truth = [texts[r] for r in rows]
            loss_sum += float(ctc_loss(logits, truth, charset, reduction="sum"))
            for read, want in zip(text_lines.ctc_greedy_decode(logits.numpy(), charset), truth, strict=True):
                correct += read == want
                errors += text_lines.edit_distance(read, want)
                chars += len(want)
    model.train()
    return [loss_sum, correct, errors, chars, float(len(mine))]
