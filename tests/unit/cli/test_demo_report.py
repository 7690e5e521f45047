"""The demo's report: the trials table, the learning-curve PNG, the JSON summary."""

from __future__ import annotations

import json
import math

import pytest

from paddleray.services.cli import demo_report
from paddleray.services.cli.demo_report import TrialResult

pytestmark = pytest.mark.unit


def _trial(name: str, accuracies: list[float], sizes: list[int], state: str = "SUCCEEDED") -> TrialResult:
    curve = [{"epoch": i + 1, "accuracy": a, "val_loss": 1 - a} for i, a in enumerate(accuracies)]
    best = max(range(len(accuracies)), key=lambda i: (accuracies[i], -i))
    checkpoint = {"uri": f"/ckpt/{name}/{best + 1}", "epoch": best + 1, "metrics": curve[best]}
    return TrialResult(job=f"jobs/exp-x-{name}", parameters={"hidden_sizes": sizes, "lr": 0.05}, state=state,
                       curve=curve, best_checkpoint=checkpoint)


def test_the_table_shows_integers_and_the_best_checkpoint_figure_and_marks_the_best(capsys):
    trials = [_trial("t0", [0.9, 0.95, 0.93], [32]), _trial("t1", [0.8, 0.85], [64], "EARLY_STOPPED")]
    demo_report.trials_table(trials, "accuracy", "jobs/exp-x-t0", "sweep")
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "exp-x-t0" in line)
    assert "jobs/exp-x-t0 *" in row and "hidden_sizes=[32]" in row
    # final 0.93, best checkpoint 0.95 at epoch 2
    assert row.split()[-3:] == ["0.93", "0.95", "2"]
    assert "best-checkpoint accuracy" in out.lower()


def test_the_png_is_written_with_the_retrain_continuing_the_best_curve(tmp_path, monkeypatch):
    import matplotlib.axes

    plotted = []
    original = matplotlib.axes.Axes.plot
    monkeypatch.setattr(matplotlib.axes.Axes, "plot", lambda self, x, y, **kw: (plotted.append(list(x)), original(self, x, y, **kw))[1])
    trials = [_trial("t0", [0.9, 0.95], [32]), _trial("t1", [0.8], [64])]
    retrain = _trial("r", [0.96, 0.97], [32])
    path = demo_report.plot_curves(tmp_path / "out" / "c.png", trials, "accuracy", "jobs/exp-x-t0", retrain,
                                   trials[0].best_checkpoint)
    # The retrain starts at the best checkpoint's epoch (2) and continues from there.
    assert [2, 3, 4] in plotted
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_the_summary_is_strict_json_with_non_finite_figures_as_null(tmp_path):
    path = demo_report.write_summary(tmp_path / "s.json", {"a": math.nan, "b": [1, math.inf], "c": {"d": 0.5}})
    assert json.loads(path.read_text()) == {"a": None, "b": [1, None], "c": {"d": 0.5}}


def test_percentiles_interpolate():
    assert demo_report.percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert demo_report.percentile(list(map(float, range(1, 101))), 99) == pytest.approx(99.01)
