"""The digits examples against a stand-in context: learning, per-epoch checkpoints, exact resume, stop."""

from __future__ import annotations

import json

import numpy as np
import pytest

from paddleray.services.trainer.examples import digits_cnn, digits_mlp, loop
from paddleray.services.trainer.examples.config import TrainConfig
from support.stand_in_context import StandInContext

pytestmark = pytest.mark.unit


def _params(checkpoint_dir) -> dict[str, np.ndarray]:
    import paddle

    return {k: v.numpy() for k, v in paddle.load(str(checkpoint_dir / loop.MODEL_FILE)).items()}


@pytest.mark.parametrize("module", [digits_mlp, digits_cnn], ids=["mlp", "cnn"])
def test_learns_and_checkpoints_every_epoch(tmp_path, module):
    config = {"epochs": 3.0, "batch_size": 32.0, "lr": 0.01}  # Struct numbers arrive as doubles
    ctx = StandInContext(tmp_path, config)

    final = module.train(config, ctx)

    assert [r["epoch"] for r in ctx.reports] == [1.0, 2.0, 3.0]
    assert final == ctx.reports[-1]
    assert final["accuracy"] > 0.85, final
    assert ctx.reports[-1]["loss"] < ctx.reports[0]["loss"]
    # 1437 train rows, global batch 32: the trailing partial batch is dropped.
    assert all(r["samples"] == 1437 // 32 * 32 for r in ctx.reports)
    assert len(ctx.checkpoints) == 3
    state = json.loads((ctx.checkpoints[-1] / loop.STATE_FILE).read_text())
    assert state == {"epoch": 3, "model": module.MODEL_NAME, "config": config}
    assert (ctx.checkpoints[-1] / loop.OPTIMIZER_FILE).is_file()


@pytest.mark.parametrize("optimizer", ["adam", "momentum"])
def test_resume_continues_exactly_where_the_checkpoint_left_off(tmp_path, optimizer):
    config = {"epochs": 3, "batch_size": 64, "lr": 0.05, "optimizer": optimizer, "hidden_sizes": [32]}
    straight = StandInContext(tmp_path / "straight", config)
    digits_mlp.train(config, straight)

    first = StandInContext(tmp_path / "first", {**config, "epochs": 1})
    digits_mlp.train({**config, "epochs": 1}, first)
    resumed = StandInContext(tmp_path / "resumed", config, latest_checkpoint=first.checkpoints[-1])
    digits_mlp.train(config, resumed)

    assert [r["epoch"] for r in resumed.reports] == [2.0, 3.0]
    want, got = _params(straight.checkpoints[-1]), _params(resumed.checkpoints[-1])
    assert want.keys() == got.keys()
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=0, atol=1e-6, err_msg=key)
    assert resumed.reports[-1]["loss"] == pytest.approx(straight.reports[-1]["loss"], rel=1e-5)


def test_fail_once_after_epoch_fails_only_an_attempt_that_started_from_no_checkpoint(tmp_path):
    config = {"epochs": 2, "hidden_sizes": [16], "fail_once_after_epoch": 1}
    first = StandInContext(tmp_path / "first", config)
    with pytest.raises(loop.InjectedFailure, match=r"after epoch 1 \(config.fail_once_after_epoch\)"):
        digits_mlp.train(config, first)
    assert [r["epoch"] for r in first.reports] == [1.0] and len(first.checkpoints) == 1
    retry = StandInContext(tmp_path / "retry", config, latest_checkpoint=first.checkpoints[-1])
    digits_mlp.train(config, retry)
    assert [r["epoch"] for r in retry.reports] == [2.0]


def test_resume_of_a_finished_run_trains_nothing(tmp_path):
    config = {"epochs": 1, "batch_size": 64}
    done = StandInContext(tmp_path / "done", config)
    digits_mlp.train(config, done)
    again = StandInContext(tmp_path / "again", config, latest_checkpoint=done.checkpoints[-1])
    assert digits_mlp.train(config, again) == {}
    assert again.reports == []


def test_fine_tune_starts_from_the_init_checkpoint_weights_unless_resuming(tmp_path):
    config = {"epochs": 2, "batch_size": 64, "lr": 0.05, "hidden_sizes": [32]}
    baseline = StandInContext(tmp_path / "baseline", config)
    digits_mlp.train(config, baseline)
    fresh = StandInContext(tmp_path / "fresh", {**config, "epochs": 1})
    digits_mlp.train({**config, "epochs": 1}, fresh)

    tuned = StandInContext(tmp_path / "tuned", {**config, "epochs": 1}, init_checkpoint=baseline.checkpoints[-1])
    digits_mlp.train({**config, "epochs": 1}, tuned)
    assert [r["epoch"] for r in tuned.reports] == [1.0], "the fine-tune counts its own epochs"
    assert tuned.reports[0]["val_loss"] < fresh.reports[0]["val_loss"], "it started from the baseline's weights"

    # A retry has its own checkpoint: that is what it resumes from, not the baseline.
    retry = StandInContext(tmp_path / "retry", config, latest_checkpoint=tuned.checkpoints[-1],
                           init_checkpoint=baseline.checkpoints[-1])
    digits_mlp.train(config, retry)
    assert [r["epoch"] for r in retry.reports] == [2.0]

    bad = StandInContext(tmp_path / "bad", config, init_checkpoint=tmp_path)
    with pytest.raises(ValueError, match="has no model.pdparams"):
        digits_mlp.train(config, bad)


def test_stop_is_honoured_between_steps(tmp_path):
    config = {"epochs": 5, "batch_size": 64}
    # 1437 // 64 = 22 steps per epoch: stop during the second epoch.
    ctx = StandInContext(tmp_path, config, stop_after_calls=30)
    digits_mlp.train(config, ctx)
    assert [r["epoch"] for r in ctx.reports] == [1.0]
    assert ctx.stop_checks == 31


def test_global_batches_are_the_same_at_any_world_size(tmp_path):
    """Step s of two ranks together covers exactly the rows one worker uses at step s."""
    from paddleray.services.trainer.examples.digits_data import load_split

    cfg = TrainConfig.from_dict({"batch_size": 64})
    x, y = load_split()["train"]
    rows = np.arange(len(y))  # use row ids as labels to see which rows each step takes
    single = list(loop._packaged_batches(StandInContext(tmp_path, {}), x, rows, cfg, shuffle=True)(epoch=3))
    ranks = [
        list(loop._packaged_batches(StandInContext(tmp_path, {}, rank=r, world_size=2), x, rows, cfg, shuffle=True)(3))
        for r in range(2)
    ]
    assert len(single) == len(ranks[0]) == len(ranks[1]) == len(y) // 64
    for step, (_, want) in enumerate(single):
        got = np.concatenate([ranks[0][step][1], ranks[1][step][1]])
        assert len(ranks[0][step][1]) == 32
        assert sorted(got) == sorted(want)
    other_epoch = list(loop._packaged_batches(StandInContext(tmp_path, {}), x, rows, cfg, shuffle=True)(epoch=4))
    assert not np.array_equal(other_epoch[0][1], single[0][1])


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"epochs": 2.5}, "config.epochs"),
        ({"epochs": 0}, "config.epochs"),
        ({"batch_size": "big"}, "config.batch_size"),
        ({"optimizer": "lbfgs"}, "config.optimizer"),
        ({"lr": -1}, "config.lr"),
        ({"validation_fraction": 1.0}, "config.validation_fraction"),
        ({"eval_batch_size": 0}, "config.eval_batch_size"),
        ({"stop_check_steps": 0}, "config.stop_check_steps"),
    ],
)
def test_bad_config_names_the_key(config, key):
    with pytest.raises(ValueError, match=key):
        TrainConfig.from_dict(config)


def test_global_batch_must_divide_over_ranks():
    with pytest.raises(ValueError, match="config.batch_size"):
        TrainConfig.from_dict({"batch_size": 33}).per_rank_batch(2)


def test_bad_model_config_names_the_key():
    with pytest.raises(ValueError, match="config.hidden_sizes"):
        digits_mlp.build_model({"hidden_sizes": []})
    with pytest.raises(ValueError, match="config.channels"):
        digits_cnn.build_model({"channels": [8]})


@pytest.mark.parametrize("module", [digits_mlp, digits_cnn], ids=["mlp", "cnn"])
def test_build_model_matches_input_spec(module):
    import paddle

    model = module.build_model({"hidden_sizes": [16, 8], "channels": [4, 8]})
    spec = module.input_spec()[0]
    out = model(paddle.zeros([3, *spec.shape[1:]], dtype=spec.dtype))
    assert out.shape == [3, 10]
