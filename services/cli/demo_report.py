"""What `paddleray demo` reports: step timings, the trials table, the learning-curve PNG and the
JSON summary. Nothing here talks to a service: the demo's steps hand over what they observed."""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from paddleray.services.cli import output
from paddleray.services.cli.progress import format_number
from paddleray.services.common import structs


class ReportError(Exception):
    """A report file cannot be written; the message says what to install or fix."""


@dataclass
class TrialResult:
    """One training job as the demo saw it: its per-epoch metrics and its best checkpoint."""

    job: str
    parameters: dict[str, Any]
    state: str
    # Every metrics report, in order (one per epoch for the digits examples).
    curve: list[dict[str, float]] = field(default_factory=list)
    # The checkpoint with the best value of the metric: {"uri", "epoch", "metrics"}.
    best_checkpoint: dict[str, Any] | None = None

    @property
    def final_metrics(self) -> dict[str, float]:
        return self.curve[-1] if self.curve else {}

    def best_checkpoint_value(self, metric: str) -> float | None:
        if self.best_checkpoint is None:
            return None
        return self.best_checkpoint["metrics"].get(metric)

    def as_data(self) -> dict[str, Any]:
        return {
            "job": self.job, "parameters": self.parameters, "state": self.state,
            "epochs": len(self.curve), "final_metrics": self.final_metrics,
            "best_checkpoint": self.best_checkpoint, "curve": self.curve,
        }


class Steps:
    """Times each step of the demo and prints its heading; the timings go into the summary."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.seconds: dict[str, float] = {}
        self.failed: str | None = None
        self._started = time.perf_counter()

    @contextlib.contextmanager
    def step(self, key: str, title: str) -> Iterator[None]:
        self.console.rule(title)
        started = time.perf_counter()
        try:
            yield
        except BaseException:
            self.failed = key
            raise
        finally:
            self.seconds[key] = round(time.perf_counter() - started, 2)
        self.console.print(f"[dim]{key}: {self.seconds[key]:.1f}s[/dim]")

    def total(self) -> float:
        return round(time.perf_counter() - self._started, 2)


def parameters_text(parameters: dict[str, Any]) -> str:
    return " ".join(f"{k}={json.dumps(structs.integral(v))}" for k, v in sorted(parameters.items()))


def trials_table(trials: list[TrialResult], metric: str, best_job: str, title: str) -> None:
    """The sweep's results; `best {metric}` is the figure of each trial's best checkpoint, the
    one the experiment ranks trials by and the retrain starts from."""
    rows = []
    for trial in trials:
        best = trial.best_checkpoint_value(metric)
        final = trial.final_metrics.get(metric)
        rows.append([
            trial.job + (" *" if trial.job == best_job else ""), parameters_text(trial.parameters), trial.state,
            str(len(trial.curve)), "-" if final is None else format_number(final),
            "-" if best is None else format_number(best),
            "-" if trial.best_checkpoint is None else str(trial.best_checkpoint["epoch"]),
        ])
    output.table(("trial", "parameters", "state", "epochs", f"final {metric}", f"best-checkpoint {metric}",
                  "at epoch"), rows, title=title)


def plot_curves(path: Path, trials: list[TrialResult], metric: str, best_job: str,
                retrain: TrialResult | None, start: dict[str, Any] | None) -> Path:
    """A PNG with the validation metric and loss per epoch of every trial; the retrain continues
    the best trial's curve from the checkpoint it started from (start: its epoch and metrics)."""
    try:
        import matplotlib
    except ImportError:
        raise ReportError("the learning-curve PNG needs matplotlib: pip install 'paddleray[demo]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for trial in trials:
        epochs = [m.get("epoch", i + 1) for i, m in enumerate(trial.curve)]
        style: dict[str, Any] = {"linewidth": 2.5} if trial.job == best_job else {"linewidth": 1.2, "alpha": 0.8}
        label = f"{trial.job.rsplit('-', 1)[-1]} {parameters_text(trial.parameters)} ({trial.state.lower()})"
        left.plot(epochs, [m.get(metric, math.nan) for m in trial.curve], marker="o", label=label, **style)
        right.plot(epochs, [m.get("val_loss", math.nan) for m in trial.curve], marker="o", **style)
    if retrain is not None and retrain.curve:
        offset = start["epoch"] if start else 0
        points = ([{**start["metrics"], "epoch": 0}] if start else []) + list(retrain.curve)
        epochs = [offset + m.get("epoch", i) for i, m in enumerate(points)]
        style = {"color": "black", "linestyle": "--", "marker": "s", "linewidth": 2}
        left.plot(epochs, [m.get(metric, math.nan) for m in points], label="retrain: 2 workers, from the best", **style)
        right.plot(epochs, [m.get("val_loss", math.nan) for m in points], **style)
    left.set(title=f"validation {metric}", xlabel="epoch", ylabel=metric)
    right.set(title="validation loss", xlabel="epoch", ylabel="val_loss")
    for axes in (left, right):
        axes.grid(alpha=0.3)
    left.legend(fontsize=7, loc="lower right")
    figure.suptitle("paddleray demo: the sweep's learning curves (the best trial thick)")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: such a figure becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def write_summary(path: Path, summary: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(_finite(summary), indent=2, allow_nan=False) + "\n")
    tmp.replace(path)
    return path


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation, as numpy's default."""
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=np.float64), q))
