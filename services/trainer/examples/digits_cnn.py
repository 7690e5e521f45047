"""Entrypoint `paddleray.services.trainer.examples.digits_cnn:train`: a small CNN on scikit-learn's digits.

Config (all optional): the training keys of examples.config.TrainConfig (epochs, batch_size,
lr, optimizer, momentum, weight_decay, seed, validation_fraction) and `channels` (output
channels of the two 3x3 conv blocks, default [16, 32]). Input is the 8x8 image as
(N, 1, 8, 8); each block halves the side (8 -> 4 -> 2). The exporter rebuilds the model with
`build_model(config)`; `input_spec()` is its input.
"""

from __future__ import annotations

from typing import Any

from paddleray.services.trainer.examples import digits_data, loop
from paddleray.services.trainer.examples.config import as_int_list

MODEL_NAME = "digits_cnn"
INPUT_SHAPE = digits_data.IMAGE_SHAPE


def build_model(config: dict[str, Any]):
    from paddle import nn

    channels = as_int_list(config, "channels", [16, 32])
    if len(channels) != 2:
        raise ValueError(f"config.channels: must list 2 conv widths, got {channels!r}")
    first, second = channels
    return nn.Sequential(
        nn.Conv2D(1, first, 3, padding=1), nn.ReLU(), nn.MaxPool2D(2),
        nn.Conv2D(first, second, 3, padding=1), nn.ReLU(), nn.MaxPool2D(2),
        nn.Flatten(),
        nn.Linear(second * 2 * 2, digits_data.NUM_CLASSES),
    )


def input_spec():
    from paddle.static import InputSpec

    return [InputSpec([None, *INPUT_SHAPE], "float32", "x")]


def train(config: dict[str, Any], ctx) -> dict[str, float]:
    return loop.fit(config, ctx, build_model, INPUT_SHAPE, MODEL_NAME)
