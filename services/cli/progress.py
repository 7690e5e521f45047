"""Live progress of a job: state, epoch/step, latest metrics, and a bar when the epochs are known.

On a terminal it is a rich progress line that updates in place, with state changes and
checkpoints printed above it; in a pipe it is one plain line per event, for logs and grep.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn, TimeElapsedColumn

from paddleray.scheduler.v1 import job_pb2
from paddleray.services.common import structs


def state_name(state: int) -> str:
    return job_pb2.JobState.Name(state).removeprefix("JOB_STATE_")


def metrics_text(metrics) -> str:
    return " ".join(f"{k}={format_number(v)}" for k, v in sorted(metrics.items()))


def first_line(reason: str) -> str:
    """A state reason's first line: a failure's traceback is in `jobs get` and the logs."""
    head, _, rest = reason.strip().partition("\n")
    return head + (" [...]" if rest else "")


def format_number(value: float) -> str:
    value = structs.integral(value)
    return str(value) if isinstance(value, int) else f"{value:.4g}"


def planned_epochs(job: job_pb2.Job) -> int | None:
    """The config's `epochs` (or `num_epochs`), when it is a positive integer."""
    config = structs.to_python(job.spec.config)
    for key in ("epochs", "num_epochs", "max_epochs"):
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


class JobProgress:
    def __init__(self, job: job_pb2.Job, console: Console) -> None:
        self.name = job.name
        self.console = console
        self.state = job.state
        self.epochs = planned_epochs(job)
        self._progress: Progress | None = None
        self._task = TaskID(0)

    def __enter__(self) -> JobProgress:
        if self.console.is_terminal:
            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(), console=self.console, transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(
                self._description(), total=self.epochs, detail="", start=True,
            )
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()

    def _description(self) -> str:
        return f"{self.name} [bold]{state_name(self.state)}[/bold]"

    def _line(self, text: str) -> None:
        if self._progress is not None:
            self._progress.console.print(text, markup=False, highlight=False)
        else:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def update(self, event: job_pb2.JobEvent) -> None:
        kind = event.WhichOneof("payload")
        prefix = f"{self.name} #{event.sequence}"
        if kind == "state_change":
            change = event.state_change
            self.state = change.to_state
            reason = f" ({first_line(change.reason)})" if change.reason else ""
            self._line(f"{prefix} {state_name(change.from_state)} -> {state_name(change.to_state)}{reason}")
        elif kind == "metrics":
            metrics = event.metrics.metrics
            epoch = structs.integral(metrics.get("epoch", 0.0))
            of = f"/{self.epochs}" if self.epochs else ""
            detail = f"epoch {epoch}{of} step {event.metrics.step} {metrics_text(metrics)}"
            if self._progress is None:
                self._line(f"{prefix} {detail}")
            elif self.epochs:
                self._progress.update(self._task, completed=min(float(epoch), self.epochs), detail=detail)
            else:
                self._progress.update(self._task, detail=detail)
        elif kind == "checkpoint":
            self._line(f"{prefix} checkpoint epoch {event.checkpoint.epoch}: {event.checkpoint.uri}")
        if self._progress is not None:
            self._progress.update(self._task, description=self._description())

    def finish(self, job: job_pb2.Job) -> None:
        self.state = job.state
        if self._progress is not None:
            self._progress.update(self._task, description=self._description())
            self._progress.stop()
            self._progress = None
        reason = f" ({first_line(job.state_reason)})" if job.state_reason else ""
        metrics = metrics_text(job.latest_metrics.metrics)
        self.console.print(
            f"{job.name} ended {state_name(job.state)}{reason} after {len(job.attempts)} attempt(s)"
            + (f"; last metrics: {metrics}" if metrics else ""),
            markup=False, highlight=False, soft_wrap=True,
        )
