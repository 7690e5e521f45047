"""The bare-Paddle baseline of bench/trainer_bench.py trains exactly what the example trains.

If it did not (other rows, order, init or optimizer), throughput_vs_bare would compare
different work; equal weights after two epochs show it is the same work.
"""

from __future__ import annotations

import numpy as np
import paddle
import pytest

from bench.trainer_bare import train as bare_train
from paddleray.services.trainer.examples import digits_cnn, loop
from support.stand_in_context import StandInContext

pytestmark = pytest.mark.unit


def test_bare_script_reaches_the_weights_of_the_example(tmp_path):
    config = {"model": "digits_cnn", "epochs": 2, "batch_size": 32, "channels": [4, 8]}
    (tmp_path / "bare").mkdir()
    result = bare_train(config, tmp_path / "bare")
    ctx = StandInContext(tmp_path / "example", config)
    digits_cnn.train(config, ctx)

    assert result["samples"] == 2 * ctx.reports[-1]["samples"]
    bare = paddle.load(str(tmp_path / "bare" / "epoch-1.pdparams"))
    example = paddle.load(str(ctx.checkpoints[-1] / loop.MODEL_FILE))
    assert bare.keys() == example.keys()
    for key in bare:
        np.testing.assert_allclose(bare[key].numpy(), example[key].numpy(), rtol=1e-5, atol=1e-6, err_msg=key)
    assert result["accuracy"] == pytest.approx(ctx.reports[-1]["accuracy"], abs=1e-6)
