"""Entrypoint `paddleray.services.trainer.examples.digits_mlp:train`: an MLP on scikit-learn's digits.

Config (all optional): the training keys of examples.config.TrainConfig (epochs, batch_size,
lr, optimizer, momentum, weight_decay, seed, validation_fraction) and `hidden_sizes` (list of
layer widths, default [64]). The exporter rebuilds the model with `build_model(config)` and
loads `model.pdparams` from a checkpoint; `input_spec()` is its input.
"""

from __future__ import annotations

from typing import Any

from paddleray.services.trainer.examples import digits_data, loop
from paddleray.services.trainer.examples.config import as_int_list

MODEL_NAME = "digits_mlp"
INPUT_SHAPE = (digits_data.NUM_FEATURES,)


def build_model(config: dict[str, Any]):
    from paddle import nn

    layers: list[nn.Layer] = []
    width = digits_data.NUM_FEATURES
    for hidden in as_int_list(config, "hidden_sizes", [64]):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, digits_data.NUM_CLASSES))
    return nn.Sequential(*layers)


def input_spec():
    from paddle.static import InputSpec

    return [InputSpec([None, *INPUT_SHAPE], "float32", "x")]


def train(config: dict[str, Any], ctx) -> dict[str, float]:
    return loop.fit(config, ctx, build_model, INPUT_SHAPE, MODEL_NAME)
