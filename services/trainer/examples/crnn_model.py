"""The text-line recognizer's network (CRNN, as PaddleOCR's rec models): conv -> BiLSTM -> classes.

Imported only where Paddle is (training workers, the export task): `crnn.build_model` loads it.

Shapes: x (N, 1, 32, W) -> four conv blocks (poolings 2x2, 2x2, 2x1, 2x1) -> (N, C, 2, W/4)
-> one feature vector per 4-pixel column (N, T=W/4, 2C) -> a bidirectional LSTM -> (N, T, classes).
W is free: nothing in the network fixes it, so `paddle.jit.to_static` with InputSpec
[None, 1, 32, None] exports one program for every width.
"""

from __future__ import annotations

from collections.abc import Sequence

import paddle
import paddle.nn.functional as F
from paddle import nn

# Narrower lines are padded: the two 2x2 poolings need a few columns to leave one time step.
MIN_WIDTH = 16


def _block(channels_in: int, channels_out: int, pool: tuple[int, int]) -> list[nn.Layer]:
    return [nn.Conv2D(channels_in, channels_out, 3, padding=1), nn.BatchNorm2D(channels_out), nn.ReLU(),
            nn.MaxPool2D(pool, stride=pool)]


class CRNN(nn.Layer):
    def __init__(self, num_classes: int, channels: Sequence[int] = (8, 16, 32), hidden: int = 32) -> None:
        super().__init__()
        first, second, third = channels
        self.backbone = nn.Sequential(
            *_block(1, first, (2, 2)), *_block(first, second, (2, 2)),
            *_block(second, third, (2, 1)), *_block(third, third, (2, 1)),
        )
        # The height left after the poolings (32 / 16 = 2) is folded into the features.
        self.project = nn.Linear(third * 2, hidden)
        self.rnn = nn.LSTM(hidden, hidden, direction="bidirect")
        self.classify = nn.Linear(2 * hidden, num_classes)

    def logits(self, x):
        """(N, T, classes) unnormalised scores: what CTC loss takes."""
        # Under to_static, x.shape[-1] is a tensor (the width is dynamic), so this `if` is
        # exported as a conditional op (pd_op.if; ONNX If), not resolved at trace time.
        # F.pad cannot take a tensor amount there; concatenating zeros can.
        width = x.shape[-1]
        if width < MIN_WIDTH:
            x = paddle.concat([x, paddle.zeros([x.shape[0], x.shape[1], x.shape[2], MIN_WIDTH - width], x.dtype)],
                              axis=-1)
        features = self.backbone(x)                                   # (N, C, 2, T)
        # reshape's 0 copies a dimension: N and T stay whatever size they have.
        features = features.transpose([0, 3, 1, 2]).reshape([0, 0, -1])  # (N, T, 2C)
        sequence, _ = self.rnn(F.relu(self.project(features)))
        return self.classify(sequence)

    def forward(self, x):
        """Training: logits for CTC loss. Evaluation (and the exported program): per time step
        class probabilities (N, T, classes), which a client decodes (text_lines.ctc_greedy_decode)."""
        scores = self.logits(x)
        if self.training:  # a Python bool: decided when to_static traces (in eval mode)
            return scores
        return F.softmax(scores, axis=-1)
