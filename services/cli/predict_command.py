"""`paddleray predict MODEL_NAME --input NAME=@file.npy`: one v2 ModelInfer through the Serve
gRPC proxy, its outputs printed (as JSON / YAML for machines)."""

from __future__ import annotations

import numpy as np
import typer

from paddleray.services.cli import output, session
from paddleray.services.cli.output import Format, OutputOption
from paddleray.services.client import ConfigError
from paddleray.services.client.tensors import parse_input, v2_datatype

InputOption = typer.Option(
    ..., "--input", "-i",
    help="NAME=@file.npy, NAME=@file.json or NAME='[[...]]' (inline JSON); NAME= may be left out when the model "
         "has one input. Repeatable, one per input.",
)


def read_inputs(given: list[str]) -> dict[str, np.ndarray]:
    inputs: dict[str, np.ndarray] = {}
    for item in given:
        try:
            name, array = parse_input(item)
        except ConfigError as error:
            raise typer.BadParameter(str(error), param_hint="--input") from None
        if name in inputs:
            raise typer.BadParameter(f"input {name or '(unnamed)'!r} is given twice", param_hint="--input")
        inputs[name] = array
    return inputs


def predict(
    ctx: typer.Context,
    model: str = typer.Argument(..., help="model_name: a deployment's serving name (`deployments list`)."),
    version: int = typer.Option(None, "--version", min=1, help="This version (default: by the traffic split)."),
    inputs: list[str] = InputOption,
    fmt: Format = OutputOption,
) -> None:
    """Run a served model on inputs from .npy / .json files (v2 ModelInfer) and print its outputs."""
    arrays = read_inputs(inputs)
    client = session.client(ctx)
    try:
        prediction = client.inference(model).predict(model, arrays, version=str(version) if version else "")
    except ConfigError as error:
        # An input that does not fit the model's metadata (a name, a datatype): a usage error.
        raise typer.BadParameter(str(error), param_hint="--input") from None
    if fmt != Format.table:
        output.emit(fmt, prediction.as_data())
        return
    out = output.console()
    out.print(f"model_name {prediction.model_name!r} version {prediction.model_version}", markup=False, highlight=False)
    for name, array in prediction.outputs.items():
        # A header line, then the values: a multi-line array does not fit a table cell in a pipe.
        out.print(f"{name} {v2_datatype(array, name)} {list(array.shape)}", markup=False, highlight=False)
        with np.printoptions(precision=4, threshold=200, edgeitems=4, linewidth=max(out.width, 40)):
            out.print(np.array2string(array, separator=", "), markup=False, highlight=False, soft_wrap=True)
        if array.ndim == 2 and array.dtype.kind == "f" and array.shape[1] > 1:
            out.print(f"argmax per row: {array.argmax(axis=1).tolist()}", markup=False, highlight=False,
                      soft_wrap=True)
