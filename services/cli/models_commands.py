"""`paddleray models export | list | get | versions | delete`: exported model versions."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from google.protobuf import timestamp_pb2

from paddleray.exporter.v1 import model_pb2
from paddleray.services.cli import output, session
from paddleray.services.cli.jobs_commands import WaitTimeoutOption, _duration, json_object
from paddleray.services.cli.output import ExitCode, Format, OutputOption
from paddleray.services.cli.progress import first_line, metrics_text
from paddleray.services.client import ConfigError
from paddleray.services.client.deployments import model_name
from paddleray.services.client.exporter import tensor_spec
from paddleray.services.common import structs

app = typer.Typer(help="Exported models and their versions.", no_args_is_help=True)
V = model_pb2.ModelVersionState
FORMATS = {"onnx": model_pb2.EXPORT_FORMAT_ONNX, "paddle": model_pb2.EXPORT_FORMAT_PADDLE_INFERENCE}
ModelArgument = typer.Argument(..., help="models/ID or ID")
FormatOption = typer.Option(None, "--format", help="Also write this format: onnx; repeatable.")
LabelOption = typer.Option(None, "--label", help="KEY=VALUE label of a new model; repeatable.")
InputOption = typer.Option(None, "--input", help="NAME:DTYPE:SHAPE of an input, e.g. x:FP32:-1,64 (-1: any size), "
                           "for a builder module without input_spec(); repeatable.")


def version_state(state: int) -> str:
    return V.Name(state).removeprefix("MODEL_VERSION_STATE_")


def enum_name(enum, value: int, prefix: str) -> str:
    return enum.Name(value).removeprefix(prefix)


def when(stamp: timestamp_pb2.Timestamp) -> str:
    return stamp.ToDatetime().strftime("%Y-%m-%d %H:%M:%S") if stamp.seconds else "-"


def tensors_text(specs) -> str:
    return ", ".join(f"{t.name} {enum_name(model_pb2.DataType, t.datatype, 'DATA_TYPE_')} {list(t.shape)}"
                     for t in specs) or "-"


def validation_text(version: model_pb2.ModelVersion) -> str:
    """One cell: passed or not, and the worst error over the backends checked."""
    backends = version.validation.backends
    if not backends:
        return "-"
    worst = max(b.max_abs_error for b in backends)
    return f"{'passed' if version.validation.passed else 'FAILED'} (max abs err {worst:.1e})"


def parse_labels(items: list[str] | None, option: str = "--label") -> dict[str, str]:
    labels = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=option)
        labels[key] = value
    return labels


def print_validation(version: model_pb2.ModelVersion) -> None:
    """The validation figures (static vs dynamic model, per backend) and the written artifacts."""
    validation = version.validation
    out = output.console()
    if validation.backends:
        rows = [[enum_name(model_pb2.Backend, b.backend, "BACKEND_"), "yes" if b.passed else "NO",
                 f"{b.max_abs_error:.2e}", f"{b.max_rel_error:.2e}", f"{b.median_latency.ToNanoseconds() / 1e6:.3f}",
                 b.message or "-"] for b in validation.backends]
        # A line of its own, not the table's title: a plain table in a pipe has none.
        out.print(f"validation: static vs dynamic model on {validation.num_samples} sample batches "
                  f"(atol {validation.atol:g}, rtol {validation.rtol:g}): {'passed' if validation.passed else 'FAILED'}",
                  markup=False, highlight=False, soft_wrap=True)
        output.table(("backend", "passed", "max abs error", "max rel error", "median ms", "message"), rows)
        print_sample_validation(validation)
    for artifact in version.artifacts:
        out.print(f"artifact {enum_name(model_pb2.ExportFormat, artifact.format, 'EXPORT_FORMAT_')}: "
                  f"{artifact.uri} ({artifact.size_bytes:,} bytes)", markup=False, highlight=False, soft_wrap=True)


def print_sample_validation(validation: model_pb2.ValidationResult) -> None:
    """Per sample batch, when they had different shapes (a model with a free width or length):
    which shapes were checked and each backend's error at each."""
    backends = [b for b in validation.backends if b.samples]
    if not backends:
        return
    shapes = [", ".join(f"{t.name} {list(t.shape)}" for t in sample.inputs) for sample in backends[0].samples]
    if len(set(shapes)) < 2:
        return
    headers = ("sample", "inputs", *(f"{enum_name(model_pb2.Backend, b.backend, 'BACKEND_')} max abs" for b in backends))
    rows = [[str(i), shape, *(f"{b.samples[i].max_abs_error:.2e}{'' if b.samples[i].passed else ' FAILED'}"
                              if i < len(b.samples) else "-" for b in backends)]
            for i, shape in enumerate(shapes)]
    output.table(headers, rows)


def print_version(version: model_pb2.ModelVersion) -> None:
    source = version.source_checkpoint
    rows = [
        ("name", version.name),
        ("state", version_state(version.state) + (f" ({first_line(version.state_reason)})" if version.state_reason else "")),
        ("source job", version.source_job or "-"),
        ("checkpoint", f"epoch {source.epoch} {metrics_text(source.metrics)} {source.uri}".strip() if source.uri else "-"),
        ("builder", version.model_builder or "-"),
        ("config", json.dumps(structs.to_python(version.model_config)) if version.HasField("model_config") else "-"),
        ("inputs", tensors_text(version.inputs)),
        ("outputs", tensors_text(version.outputs)),
        ("metadata", json.dumps(structs.to_python(version.metadata), ensure_ascii=False)
         if version.HasField("metadata") else "-"),
        ("created", when(version.create_time)),
    ]
    output.pairs(rows)
    print_validation(version)


def follow_version(name: str, client, wait_timeout: float | None, fmt: Format) -> ExitCode:
    """Prints each state change until the export settles, then the version; 0 only when READY."""
    shown: list[str] = []

    def progress(current: model_pb2.ModelVersion) -> None:
        line = f"{current.name} {version_state(current.state)}"
        if fmt == Format.table and (not shown or shown[-1] != line):
            output.console().print(line, markup=False, highlight=False)
            shown.append(line)

    done = client.exporter.wait_model_version(name, timeout=wait_timeout, on_update=progress)
    if fmt != Format.table:
        output.emit(fmt, output.as_data(done))
    else:
        print_version(done)
    return ExitCode.SUCCEEDED if done.state == V.MODEL_VERSION_STATE_READY else ExitCode.FAILED


@app.command()
def export(
    ctx: typer.Context,
    model: str = typer.Option(..., "--model", help="Model to add the version to: models/ID or ID (created when new)."),
    job: str = typer.Option("", "--job", help="Export this job's best checkpoint (jobs/ID or ID)."),
    checkpoint: str = typer.Option("", "--checkpoint", help="Or a checkpoint directory URI under the storage root."),
    builder: str = typer.Option("", "--builder", help="package.module:function building the model (default: the "
                                                      "job's entrypoint module's build_model)."),
    config: str = typer.Option(None, "--config", help="JSON object for the builder (default: the job's config)."),
    working_dir: str = typer.Option("", "--working-dir", help="The builder's code: a project directory (uploaded as "
                                    "`submit` uploads a job's) or a package URI (default: the job's)."),
    inputs: list[str] = InputOption,
    dynamic_sizes: str = typer.Option("", "--dynamic-sizes", help="Validation: sizes for the dynamic dimensions "
                                      "after the first (a width, a length), one sample each, e.g. 24,64,200 "
                                      "(default 16,32,64,128)."),
    formats: list[str] = FormatOption,
    display_name: str = typer.Option("", "--display-name", help="Display name of a new model."),
    label: list[str] = LabelOption,
    wait: bool = typer.Option(False, "--wait", help="Follow the export until it settles; exit 0 only when READY."),
    wait_timeout: str = WaitTimeoutOption,
    fmt: Format = OutputOption,
) -> None:
    """Export a job's (or a checkpoint's) weights to a static model, as a new version."""
    if bool(job) == bool(checkpoint):
        raise typer.BadParameter("give exactly one of --job and --checkpoint", param_hint="--job / --checkpoint")
    if checkpoint and not builder:
        raise typer.BadParameter("is required with --checkpoint (there is no job to take it from)", param_hint="--builder")
    model_config = json_object(config, "--config", '{"hidden_sizes": [64]}') if config is not None else None
    chosen = []
    for given in formats or []:
        if given.lower() not in FORMATS:
            raise typer.BadParameter(f"{given!r} is not one of {', '.join(FORMATS)}", param_hint="--format")
        chosen.append(FORMATS[given.lower()])
    try:
        specs = [tensor_spec(text) for text in inputs or []]
    except ConfigError as error:
        raise typer.BadParameter(str(error), param_hint="--input") from None
    validation = None
    if dynamic_sizes:
        sizes = [part.strip() for part in dynamic_sizes.split(",")]
        if not all(part.isdigit() and int(part) > 0 for part in sizes):
            raise typer.BadParameter(f"expected positive integers separated by commas, got {dynamic_sizes!r}",
                                     param_hint="--dynamic-sizes")
        validation = model_pb2.ValidationOptions(dynamic_sizes=[int(part) for part in sizes], num_samples=len(sizes))
    timeout = _duration(wait_timeout, "--wait-timeout")
    client = session.client(ctx)
    version = client.exporter.export_model(
        model, job=job, checkpoint_uri=checkpoint, formats=tuple(chosen), model_builder=builder,
        model_config=model_config, display_name=display_name, labels=parse_labels(label),
        working_dir=str(Path(working_dir).resolve()) if working_dir and "://" not in working_dir else working_dir,
        inputs=specs, validation=validation,
    )
    if wait:
        if fmt == Format.table:
            output.console().print(f"exporting {version.name}", markup=False)
        raise typer.Exit(int(follow_version(version.name, client, timeout, fmt)))
    if fmt != Format.table:
        output.emit(fmt, output.as_data(version))
        return
    output.console().print(f"created {version.name} ({version_state(version.state)})", markup=False)


@app.command(name="list")
def list_models(ctx: typer.Context, limit: int = typer.Option(50, min=1), fmt: Format = OutputOption) -> None:
    """List models, newest first."""
    models = list(session.client(ctx).exporter.list_models(limit=limit))
    if fmt != Format.table:
        output.emit(fmt, [output.as_data(m) for m in models])
        return
    rows = [[m.name, m.display_name or "-", str(m.latest_version),
             " ".join(f"{k}={v}" for k, v in sorted(m.labels.items())) or "-", when(m.create_time)] for m in models]
    output.table(("model", "display name", "latest version", "labels", "created"), rows)


def version_rows(versions: list[model_pb2.ModelVersion]) -> list[list[str]]:
    return [[v.name, version_state(v.state), v.source_job or "-",
             f"epoch {v.source_checkpoint.epoch}" if v.source_checkpoint.uri else "-",
             metrics_text(v.source_checkpoint.metrics) or "-", validation_text(v), when(v.create_time)]
            for v in versions]


VERSION_HEADERS = ("version", "state", "source job", "checkpoint", "checkpoint metrics", "validation", "created")


@app.command()
def versions(ctx: typer.Context, model: str = ModelArgument, limit: int = typer.Option(50, min=1),
             fmt: Format = OutputOption) -> None:
    """List a model's versions, newest first."""
    found = list(session.client(ctx).exporter.list_model_versions(model, limit=limit))
    if fmt != Format.table:
        output.emit(fmt, [output.as_data(v) for v in found])
        return
    output.table(VERSION_HEADERS, version_rows(found))


@app.command()
def get(ctx: typer.Context, name: str = typer.Argument(..., help="models/ID, or models/ID/versions/N for one version"),
        fmt: Format = OutputOption) -> None:
    """Show a model and its versions, or one version with its validation figures."""
    exporter = session.client(ctx).exporter
    if "/versions/" in name:
        version = exporter.get_model_version(name)
        if fmt != Format.table:
            output.emit(fmt, output.as_data(version))
        else:
            print_version(version)
        return
    model = exporter.get_model(name)
    found = list(exporter.list_model_versions(model.name))
    if fmt != Format.table:
        output.emit(fmt, {**output.as_data(model), "versions": [output.as_data(v) for v in found]})
        return
    output.pairs([
        ("name", model.name), ("display name", model.display_name or "-"), ("latest version", str(model.latest_version)),
        ("labels", " ".join(f"{k}={v}" for k, v in sorted(model.labels.items())) or "-"),
        ("created", when(model.create_time)),
    ])
    output.table(VERSION_HEADERS, version_rows(found))


@app.command()
def delete(ctx: typer.Context,
           name: str = typer.Argument(..., help="models/ID (with every version), or models/ID/versions/N")) -> None:
    """Delete a model (or one version) and its artifacts; refused while a deployment serves it."""
    exporter = session.client(ctx).exporter
    if "/versions/" in name:
        exporter.delete_model_version(name)
        shown = name if name.startswith("models/") else f"models/{name}"
    else:
        exporter.delete_model(name)
        shown = model_name(name)
    output.console().print(f"deleted {shown}", markup=False)

