"""The text-line example's data (rendering, padding, CTC targets and decoding, the font rule)
and its training loop against a stand-in context: checkpoints every epoch, exact resume."""

from __future__ import annotations

import json

import numpy as np
import pytest

from paddleray.services.trainer.examples import crnn, loop, text_lines
from support.stand_in_context import StandInContext

pytestmark = pytest.mark.unit
SMALL = {"train_lines": 32, "validation_lines": 8, "batch_size": 8, "epochs": 2}


def test_lines_render_the_same_from_the_same_seed_at_any_width():
    font = text_lines.find_font()
    texts = ["12年", "3月45日", "元"]
    first = text_lines.render_lines(texts, font, (0, 0))
    again = text_lines.render_lines(texts, font, (0, 0))
    other = text_lines.render_lines(texts, font, (1, 0))
    for a, b, c in zip(first, again, other, strict=True):
        assert a.dtype == np.float32 and a.shape[:2] == (1, text_lines.HEIGHT)
        assert a.shape[-1] % text_lines.WIDTH_STEP == 0 and 0.0 <= a.min() and a.max() <= 1.0
        np.testing.assert_array_equal(a, b)
        assert a.shape != c.shape or not np.array_equal(a, c)
    # Longer text, wider line; ink is drawn (1 = ink, 0 = background).
    assert first[1].shape[-1] > first[2].shape[-1] and first[1].max() > 0.5


def test_a_batch_is_right_padded_with_background_to_the_widest():
    lines = [np.ones((1, text_lines.HEIGHT, 8), np.float32), np.ones((1, text_lines.HEIGHT, 20), np.float32)]
    batch = text_lines.to_batch(lines)
    assert batch.shape == (2, 1, text_lines.HEIGHT, 20)
    assert batch[0, :, :, :8].min() == 1.0 and batch[0, :, :, 8:].max() == 0.0
    assert text_lines.to_batch(lines, width=30).shape[-1] == 32  # rounded up to the time step


def test_ctc_greedy_decoding_collapses_repeats_and_drops_blanks():
    charset = "ab年"

    def one_hot(path):
        return np.eye(len(charset) + 1)[path][None]

    # a a _ a b b _ 年 -> "aab年": a repeat survives only across a blank.
    assert text_lines.ctc_greedy_decode(one_hot([1, 1, 0, 1, 2, 2, 0, 3]), charset) == ["aab年"]
    assert text_lines.ctc_greedy_decode(one_hot([0, 0, 0]), charset) == [""]
    labels, lengths = text_lines.encode(["ab", "年"], charset)
    assert labels.tolist() == [[1, 2], [3, 0]] and lengths.tolist() == [2, 1]
    assert text_lines.edit_distance("2024年", "2O24年") == 1 and text_lines.edit_distance("", "ab") == 2


def test_random_texts_are_distinct_and_avoid_the_excluded():
    first = text_lines.random_texts(50, "01", (0, 0), min_chars=3, max_chars=6)
    assert len(set(first)) == 50 and all(3 <= len(t) <= 6 and set(t) <= {"0", "1"} for t in first)
    second = text_lines.random_texts(20, "01", (0, 1), min_chars=3, max_chars=6, exclude=first)
    assert not set(second) & set(first)
    with pytest.raises(ValueError, match="cannot draw"):
        text_lines.random_texts(5, "0", (0, 0), min_chars=1, max_chars=2)


def test_a_missing_font_names_the_debian_package(monkeypatch, tmp_path):
    monkeypatch.setattr(text_lines, "FONT_CANDIDATES", ((str(tmp_path / "none.ttc"), "fonts-wqy-microhei"),))
    with pytest.raises(text_lines.FontMissing, match="install the Debian package fonts-wqy-microhei"):
        text_lines.find_font()
    with pytest.raises(text_lines.FontMissing, match="fonts-wqy-microhei"):
        crnn.train({}, StandInContext(tmp_path, {}))
    with pytest.raises(text_lines.FontMissing, match="config.font"):
        text_lines.find_font(str(tmp_path / "nope.ttf"))


@pytest.mark.parametrize(("config", "says"), [
    ({"charset": "aa"}, "config.charset: characters must be distinct"),
    ({"charset": ""}, "config.charset"),
    ({"charset": "a b"}, "whitespace"),
    ({"min_chars": 4, "max_chars": 3}, "config.max_chars"),
    ({"channels": [8, 16]}, "config.channels"),
    ({"batch_size": 3}, "config.batch_size"),
])
def test_bad_config_fails_naming_the_key(tmp_path, config, says):
    with pytest.raises(ValueError, match=says):
        crnn.train({**SMALL, **config}, StandInContext(tmp_path, config, world_size=2))


def test_held_out_lines_are_neither_train_nor_validation_lines():
    splits = crnn.splits(SMALL)
    texts, lines = crnn.held_out(SMALL, 16)
    assert len(lines) == 16 and not set(texts) & (set(splits["train"][0]) | set(splits["validation"][0]))


def test_checkpoints_every_epoch_and_resumes_exactly(tmp_path):
    import paddle

    straight = StandInContext(tmp_path / "straight", SMALL)
    crnn.train(SMALL, straight)
    assert [r["epoch"] for r in straight.reports] == [1.0, 2.0]
    assert {"loss", "val_loss", "accuracy", "cer", "samples"} <= set(straight.reports[-1])
    assert straight.reports[-1]["samples"] == 32
    state = json.loads((straight.checkpoints[-1] / loop.STATE_FILE).read_text())
    assert state == {"epoch": 2, "model": crnn.MODEL_NAME, "config": SMALL}

    first = StandInContext(tmp_path / "first", {**SMALL, "epochs": 1})
    crnn.train({**SMALL, "epochs": 1}, first)
    resumed = StandInContext(tmp_path / "resumed", SMALL, latest_checkpoint=first.checkpoints[-1])
    crnn.train(SMALL, resumed)
    assert [r["epoch"] for r in resumed.reports] == [2.0]
    want = paddle.load(str(straight.checkpoints[-1] / loop.MODEL_FILE))
    got = paddle.load(str(resumed.checkpoints[-1] / loop.MODEL_FILE))
    assert want.keys() == got.keys()
    for key in want:
        np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), rtol=0, atol=1e-6, err_msg=key)


def test_fail_once_after_epoch_fails_the_first_attempt_after_its_checkpoint_and_not_the_retry(tmp_path):
    import paddle

    straight = StandInContext(tmp_path / "straight", SMALL)
    crnn.train(SMALL, straight)
    config = {**SMALL, "fail_once_after_epoch": 1}
    first = StandInContext(tmp_path / "first", config)
    with pytest.raises(loop.InjectedFailure, match="after epoch 1"):
        crnn.train(config, first)
    assert [r["epoch"] for r in first.reports] == [1.0] and len(first.checkpoints) == 1
    retry = StandInContext(tmp_path / "retry", config, latest_checkpoint=first.checkpoints[-1])
    crnn.train(config, retry)
    assert [r["epoch"] for r in retry.reports] == [2.0]
    assert retry.reports[-1]["loss"] == straight.reports[-1]["loss"]
    want = paddle.load(str(straight.checkpoints[-1] / loop.MODEL_FILE))
    got = paddle.load(str(retry.checkpoints[-1] / loop.MODEL_FILE))
    for key in want:
        np.testing.assert_array_equal(got[key].numpy(), want[key].numpy(), err_msg=key)


def test_fail_once_after_epoch_must_be_a_whole_number_of_epochs(tmp_path):
    with pytest.raises(ValueError, match="config.fail_once_after_epoch: must be an integer"):
        crnn.train({**SMALL, "fail_once_after_epoch": 1.5}, StandInContext(tmp_path, SMALL))


def test_evaluation_gives_probabilities_training_gives_logits():
    import paddle

    with paddle.utils.unique_name.guard():
        model = crnn.build_model({"charset": "ab"})
    x = paddle.rand([2, 1, text_lines.HEIGHT, 40])
    assert model(x).shape == [2, 10, 3]
    model.eval()
    probs = model(x).numpy()
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)
    # Narrower than MIN_WIDTH: padded inside forward, so it still has time steps.
    assert model(paddle.rand([1, 1, text_lines.HEIGHT, 4])).shape == [1, 4, 3]
