"""`paddleray demo`: the README's main command, the whole story in one go.

Uses the local stack when one is already running (and leaves it running), else starts its own
(Redis, a Ray head, the three services) and stops it at the end; then, through the SDK as a
user would: a sweep of the digits MLP (2 trials at a time, live progress), its results table,
the best configuration retrained data-parallel on 2 workers from the best trial's checkpoint,
that job exported with validation figures, deployed on Ray Serve, and queried through the v2
inference API on the held-out digits (accuracy, p50/p99 latency). It writes a PNG of the
trials' learning curves and a JSON summary (every step's figures and timings), named at the end.
"""

from __future__ import annotations

import contextlib
import datetime
import enum
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from google.protobuf import json_format
from google.protobuf.message import Message
from rich.console import Console

from paddleray.services.cli import demo_report, demo_serving, demo_training
from paddleray.services.cli.demo_training import METRIC, DemoFailed, SweepPlan
from paddleray.services.cli.output import ExitCode
from paddleray.services.cli.stack_commands import StateDir, show
from paddleray.services.client import Client, ClientError, ConnectionConfig
from paddleray.services.common import structs
from paddleray.services.localstack import stack

console = Console()
MODEL_ID = "digits-demo"


class Until(enum.StrEnum):
    """The last step to run; the default runs the whole story."""

    sweep = "sweep"
    retrain = "retrain"
    export = "export"
    query = "query"


UntilOption = typer.Option(Until.query, "--until", help="Stop after this step (sweep, retrain, export, query).")
OutDirOption = typer.Option(Path(".paddleray") / "demo", "--out-dir", help="Where the PNG and the JSON summary go.")


def full_data(message: Message) -> dict[str, Any]:
    """A proto as JSON-like data with every field, zeros included: a validation figure of 0.0
    is a measurement, not a missing one."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                     always_print_fields_with_no_presence=True)


@contextlib.contextmanager
def demo_stack(state_dir: Path, keep: bool) -> Iterator[stack.StackState]:
    """A running stack: the one already up in state_dir (never stopped here), else our own."""
    existing = stack.StackState.load(state_dir)
    if existing is not None and all(existing.serving(name) for name in existing.services):
        console.print(f"using the stack already running ({stack.state_file(state_dir)}); it stays running")
        yield existing
        return
    with console.status("starting Redis, a local Ray head and the three services ..."):
        state = stack.up(state_dir)
    try:
        yield state
    finally:
        if not keep:
            stack.down(state_dir)
            console.print("stack stopped (use --keep to leave it running)")


def demo(
    state_dir: Path = StateDir,
    keep: bool = typer.Option(False, help="Leave the deployment serving and a stack the demo started running."),
    out_dir: Path = OutDirOption,
    until: Until = UntilOption,
) -> None:
    """Sweep, retrain the best data-parallel, export, deploy and query, on the local stack."""
    # A terminated demo still stops the stack it started (and deletes its deployment).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    run_id = uuid.uuid4().hex[:6]
    steps = demo_report.Steps(console)
    summary: dict[str, Any] = {"run_id": run_id, "started_at": datetime.datetime.now(datetime.UTC).isoformat(),
                               "until": until.value}
    paths = {"png": out_dir / f"demo-{run_id}-curves.png", "json": out_dir / f"demo-{run_id}-summary.json"}
    code = ExitCode.SUCCEEDED
    try:
        with contextlib.ExitStack() as held:
            with steps.step("stack", "0. the local stack: Redis, a Ray head, scheduler, trainer, exporter"):
                state = held.enter_context(demo_stack(state_dir, keep))
                summary["stack"] = {"state_file": str(stack.state_file(state_dir)),
                                    **{name: p.address for name, p in state.services.items()}}
                if not show(state):
                    raise DemoFailed("a service of the stack is not serving")
            settings = ConnectionConfig(address=state.address("scheduler"), exporter_address=state.address("exporter"),
                                        source=f"local stack {stack.state_file(state_dir)}")
            with Client(settings) as client:
                story(client, steps, summary, paths, run_id, keep, until)
    except (DemoFailed, ClientError, demo_report.ReportError) as error:
        console.print(f"[red]demo failed in step {steps.failed or '?'}:[/red] {error}", highlight=False)
        summary["failed"] = {"step": steps.failed, "error": str(error)}
        code = ExitCode.FAILED
    finally:
        summary["timings_s"] = {**steps.seconds, "total": steps.total()}
        summary["files"] = {name: str(path.resolve()) for name, path in paths.items() if name == "json" or path.exists()}
        demo_report.write_summary(paths["json"], summary)
    console.rule("done" if code == ExitCode.SUCCEEDED else "failed")
    console.print(f"total {summary['timings_s']['total']:.1f}s; " + ", ".join(
        f"{k} {v:.1f}s" for k, v in summary["timings_s"].items() if k != "total"), highlight=False)
    if "png" in summary["files"]:
        console.print(f"learning curves: {summary['files']['png']}", highlight=False, soft_wrap=True)
    console.print(f"summary: {summary['files']['json']}", highlight=False, soft_wrap=True)
    raise typer.Exit(int(code))


def story(client: Client, steps: demo_report.Steps, summary: dict[str, Any], paths: dict[str, Path],
          run_id: str, keep: bool, until: Until) -> None:
    plan = SweepPlan()
    labels = {"demo": run_id}
    with steps.step("sweep", f"1. a sweep: {len(plan.learning_rates) * len(plan.hidden_sizes)} trials of learning "
                             f"rate x width, {plan.max_concurrent} at a time, ASHA on {METRIC}"):
        experiment, trials = demo_training.run_sweep(client, console, plan, labels)
        best = experiment.best_trial
        demo_report.trials_table(trials, METRIC, best.job, f"{experiment.name}: SUCCEEDED ( * = best trial)")
        console.print(demo_training.best_line(experiment), markup=False, highlight=False, soft_wrap=True)
    summary["experiment"] = {"name": experiment.name, "metric": METRIC, "mode": "max",
                             "total_trials": experiment.total_trials}
    summary["trials"] = [t.as_data() for t in trials]
    summary["best_trial"] = {
        "job": best.job, "parameters": structs.to_python(best.parameters),
        f"best_checkpoint_{METRIC}": best.checkpoint.metrics.get(METRIC, best.metric_value),
        "checkpoint": demo_training.checkpoint_data(best.checkpoint),
    }
    if until == Until.sweep:
        return

    with steps.step("retrain", f"2. the best configuration retrained on {plan.retrain_workers} data-parallel "
                               "workers, from the best trial's checkpoint"):
        job, retrained = demo_training.retrain(client, console, plan, experiment, labels)
    config = structs.to_python(job.spec.config)
    summary["retrain"] = {**{k: v for k, v in retrained.as_data().items() if k != "parameters"}, "num_workers": job.spec.num_workers, "config": config,
                          "init_from": {"job": job.spec.init_from.job, "resolved_uri": job.spec.init_from.resolved_uri,
                                        "is_best_trial_checkpoint": job.spec.init_from.resolved_uri == best.checkpoint.uri}}
    with steps.step("report", "the trials' learning curves"):
        start = next((t.best_checkpoint for t in trials if t.job == best.job), None)
        demo_report.plot_curves(paths["png"], trials, METRIC, best.job, retrained, start)
        console.print(f"wrote {paths['png']}", highlight=False, soft_wrap=True)
    if until == Until.retrain:
        return

    with steps.step("export", f"3. {job.name} exported to a static graph and validated against the dynamic model"):
        version = demo_serving.export(client, console, job.name, MODEL_ID)
    summary["model_version"] = full_data(version)
    if until == Until.export:
        return

    deployment_id = f"{MODEL_ID}-{run_id}"
    with steps.step("deploy", f"4. {version.name} deployed on Ray Serve"):
        try:
            deployment = demo_serving.deploy(client, console, version, deployment_id)
        except BaseException:
            # A deployment that never got healthy is the demo's too: left on a stack the user
            # keeps (or a Ray cluster shared with another installation), it would serve on.
            if not keep:
                demo_serving.undeploy_if_created(client, console, deployment_id)
            raise
    summary["deployment"] = full_data(deployment)
    try:
        features, labels_ = demo_serving.held_out(config)
        with steps.step("query", f"5. the {len(labels_)} held-out digits through the v2 inference API (ModelInfer)"):
            summary["inference"] = demo_serving.query(client, console, deployment, version, features, labels_)
        summary["inference"]["expected_accuracy"] = version.source_checkpoint.metrics.get(METRIC)
    finally:
        if not keep:
            demo_serving.undeploy(client, console, deployment.name)
