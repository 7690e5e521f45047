"""Job and experiment spec files (YAML) -> scheduler protos, with errors that name file:line.

A job spec reads like a simpler RayJob / PaddleJob (examples/job.yaml):

    entrypoint: paddleray.services.trainer.examples.digits_mlp:train
    config: {epochs: 3, lr: 0.05, hidden_sizes: [64]}
    num_workers: 2
    resources: {cpus: 1, gpus: 0, memory: 2Gi}
    retries: 2
    timeout: 30m

An experiment spec (examples/sweep.yaml) has a `trial:` job spec, a `search_space:` and the
sweep's settings. Every error is one line: "FILE:LINE: FIELD: what is wrong".
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from google.protobuf import json_format
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import experiment_pb2, job_pb2
from paddleray.services.client.errors import SpecError
from paddleray.services.common import structs

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)\s*(Ki|Mi|Gi|Ti|K|M|G|T)?$")
_MEMORY_UNITS = {None: 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
                 "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def parse_duration(value: Any) -> float:
    """Seconds from 90, "90s", "10m", "1h30m"; rejects NaN, infinities and negatives."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 90, '90s', '10m' or '1h30m'")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value).strip())
        if not match or not any(match.groups()):
            raise ValueError(f"expected a duration such as 90, '90s', '10m' or '1h30m', got {value!r}")
        hours, minutes, secs = (float(g) if g else 0.0 for g in match.groups())
        seconds = hours * 3600 + minutes * 60 + secs
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"must be a finite duration >= 0, got {value!r}")
    return seconds


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


SpecT = TypeVar("SpecT", bound=_Spec)


class ResourcesSpec(_Spec):
    cpus: float = Field(1.0, gt=0, allow_inf_nan=False)
    gpus: float = Field(0.0, ge=0, allow_inf_nan=False)
    memory: int | str = 0
    custom: dict[str, float] = Field(default_factory=dict)

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: int | str) -> int:
        if isinstance(value, int):
            if value < 0:
                raise ValueError("must be >= 0 bytes")
            return value
        match = _MEMORY.match(value.strip())
        if not match:
            raise ValueError(f"expected bytes or a quantity such as 512Mi or 2Gi, got {value!r}")
        return int(float(match.group(1)) * _MEMORY_UNITS[match.group(2)])


class RetrySpec(_Spec):
    max_retries: int = Field(0, ge=0, le=100)
    initial_backoff: float | str = 1.0
    max_backoff: float | str = 300.0
    backoff_multiplier: float = Field(2.0, ge=1.0, allow_inf_nan=False)

    @field_validator("initial_backoff", "max_backoff")
    @classmethod
    def _duration(cls, value: float | str) -> float:
        return parse_duration(value)


class DatasetSpec(_Spec):
    name: str = Field(min_length=1)
    uri: str = Field(min_length=1)
    format: Literal["parquet", "csv", "npy", ""] = ""


class CheckpointSpec(_Spec):
    keep_last: int = Field(0, ge=0)
    keep_best: int = Field(0, ge=0)
    best_metric: str = ""
    best_mode: Literal["min", "max", ""] = ""
    commit_in_background: bool = False


class JobSpec(_Spec):
    name: str = ""
    display_name: str = ""
    entrypoint: str = Field(min_length=1)
    working_dir: str = ""
    config: dict[str, Any] = Field(default_factory=dict)
    num_workers: int = Field(1, ge=1, le=1024)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    retries: int | RetrySpec = 0
    timeout: float | str = 0
    priority: int = Field(0, ge=-1000, le=1000)
    tenant: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    image: str = ""
    placement: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    datasets: list[DatasetSpec] = Field(default_factory=list)
    checkpoints: CheckpointSpec = Field(default_factory=CheckpointSpec)
    init_from: str | dict[str, Any] | None = None

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: float | str) -> float:
        return parse_duration(value)


class SearchParameter(_Spec):
    grid: list[Any] | None = None
    choice: list[Any] | None = None
    uniform: tuple[float, float] | None = None
    loguniform: tuple[float, float] | None = None
    randint: tuple[int, int] | None = None


class AshaSpec(_Spec):
    time_attr: str = "epoch"
    max_t: int = Field(ge=1)
    grace_period: int = Field(1, ge=1)
    reduction_factor: float = Field(2.0, gt=1, allow_inf_nan=False)


class EarlyStoppingSpec(_Spec):
    asha: AshaSpec


class ExperimentSpec(_Spec):
    name: str = ""
    display_name: str = ""
    trial: JobSpec
    search_space: dict[str, SearchParameter] = Field(min_length=1)
    algorithm: Literal["grid", "random"] = "grid"
    num_samples: int = Field(1, ge=1)
    max_concurrent_trials: int = Field(0, ge=0)
    metric: str = Field(min_length=1)
    mode: Literal["min", "max"] = "max"
    seed: int = 0
    labels: dict[str, str] = Field(default_factory=dict)
    early_stopping: EarlyStoppingSpec | None = None


def _load(path: Path) -> tuple[Any, yaml.Node | None]:
    try:
        text = path.read_text()
    except OSError as error:
        raise SpecError(f"{path}: cannot read ({error.strerror})") from None
    try:
        return yaml.safe_load(text), yaml.compose(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise SpecError(f"{where}: not valid YAML: {getattr(error, 'problem', None) or error}") from None


def _line(node: yaml.Node | None, loc: tuple) -> int | None:
    """The line of the YAML node at loc (pydantic's error path), or of its nearest parent."""
    line = None if node is None else node.start_mark.line + 1
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == key), None)
            if match is None:
                match = next((k for k, _ in node.value if k.value == key), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            match = node.value[key]
        else:
            match = None
        if match is None:
            break
        node, line = match, match.start_mark.line + 1
    return line


def _validated(model: type[SpecT], path: Path) -> tuple[SpecT, yaml.Node | None]:
    data, node = _load(path)
    if not isinstance(data, dict):
        raise SpecError(f"{path}:1: expected a mapping of fields (see examples/)")
    try:
        return model.model_validate(data), node
    except ValidationError as error:
        # A union reports one error per alternative: the deepest one is the one meant.
        first = max(error.errors(), key=lambda e: len(e["loc"]))
        loc = tuple(part for part in first["loc"] if not (isinstance(part, str) and part.endswith("]")))
        # Unions report each alternative ("retries.int", "retries.RetrySpec"): name the field only.
        shown = [str(p) for p in loc if not (isinstance(p, str) and (p[:1].isupper() or p in ("int", "str", "float", "dict")))]
        line = _line(node, loc)
        where = f"{path}:{line}" if line else str(path)
        message = first["msg"].removeprefix("Value error, ")
        extra = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
        raise SpecError(f"{where}: {'.'.join(shown) or 'spec'}: {message}{extra}") from None


def _spec_relative(path: str, base_dir: Path) -> str:
    """A local path of a spec file (working_dir, a dataset's uri) resolved against the file's
    folder, as `kubectl apply -f` resolves kustomize paths; a URI (s3://...) is left as it is.
    A working_dir is then shipped (Client.ship_code); a dataset must lie under the storage root,
    which CreateJob checks and names."""
    if "://" in path and not path.startswith("file://"):
        return path
    return str((base_dir / path.removeprefix("file://")).resolve())


def job_from_spec(spec: JobSpec, base_dir: Path) -> tuple[job_pb2.Job, str]:
    """The Job proto and the requested job id."""
    resources = common_pb2.Resources(
        num_cpus=spec.resources.cpus, num_gpus=spec.resources.gpus, memory_bytes=int(spec.resources.memory),
        custom=spec.resources.custom,
    )
    training = common_pb2.TrainingSpec(
        entrypoint=spec.entrypoint, num_workers=spec.num_workers, resources_per_worker=resources,
        config=structs.to_struct(spec.config),
        placement_strategy=f"PLACEMENT_STRATEGY_{spec.placement}",
        runtime_env=common_pb2.RuntimeEnv(image=spec.image, env_vars=spec.env),
        checkpoint_policy=common_pb2.CheckpointPolicy(
            keep_last=spec.checkpoints.keep_last, keep_best=spec.checkpoints.keep_best,
            best_metric=spec.checkpoints.best_metric,
            best_mode={"min": common_pb2.METRIC_MODE_MIN, "max": common_pb2.METRIC_MODE_MAX}.get(
                spec.checkpoints.best_mode, common_pb2.METRIC_MODE_UNSPECIFIED),
            commit_in_background=spec.checkpoints.commit_in_background,
        ),
        datasets=[
            common_pb2.Dataset(name=d.name, uri=_spec_relative(d.uri, base_dir),
                               format=f"DATASET_FORMAT_{d.format.upper()}" if d.format else "DATASET_FORMAT_UNSPECIFIED")
            for d in spec.datasets
        ],
    )
    if spec.working_dir:
        training.runtime_env.working_dir = _spec_relative(spec.working_dir, base_dir)
    if spec.init_from is not None:
        if "init_from" not in common_pb2.TrainingSpec.DESCRIPTOR.fields_by_name:
            raise SpecError("init_from: not supported by this version of paddleray (TrainingSpec has no init_from)")
        source = spec.init_from
        if isinstance(source, str):
            # Shorthand: a job name, a model version name, or a checkpoint directory.
            kind = "job" if source.startswith("jobs/") else "model_version" if source.startswith("models/") else "checkpoint_uri"
            source = {kind: source}
        try:
            json_format.ParseDict({"init_from": source}, training, ignore_unknown_fields=False)
        except json_format.ParseError as error:
            raise SpecError(f"init_from: {error}") from None
    job = job_pb2.Job(spec=training, display_name=spec.display_name, priority=spec.priority, tenant=spec.tenant,
                      labels=spec.labels)
    retry = spec.retries if isinstance(spec.retries, RetrySpec) else RetrySpec(max_retries=spec.retries)
    job.retry_policy.max_retries = retry.max_retries
    job.retry_policy.initial_backoff.FromNanoseconds(int(float(retry.initial_backoff) * 1e9))
    job.retry_policy.max_backoff.FromNanoseconds(int(float(retry.max_backoff) * 1e9))
    job.retry_policy.backoff_multiplier = retry.backoff_multiplier
    if spec.timeout:
        job.timeout.FromNanoseconds(int(float(spec.timeout) * 1e9))
    return job, spec.name


def load_job(path: str | Path) -> tuple[job_pb2.Job, str]:
    """A job spec file as (Job, job_id); SpecError naming file:line and field otherwise."""
    path = Path(path)
    spec, node = _validated(JobSpec, path)
    try:
        return job_from_spec(spec, path.parent)
    except SpecError as error:
        raise SpecError(f"{path}:{_line(node, (str(error).split(':')[0],)) or 1}: {error}") from None


def _distribution(name: str, parameter: SearchParameter) -> experiment_pb2.ParameterDistribution:
    given = [k for k, v in parameter.model_dump().items() if v is not None]
    if len(given) != 1:
        raise SpecError(f"search_space.{name}: give exactly one of grid, choice, uniform, loguniform, randint")
    kind = given[0]
    out = experiment_pb2.ParameterDistribution()
    value = getattr(parameter, kind)
    if kind in ("grid", "choice"):
        if not value:
            raise SpecError(f"search_space.{name}.{kind}: needs at least one value")
        target = getattr(out, kind).values
        for item in value:
            target.add().CopyFrom(structs.to_struct({"v": item}).fields["v"])
    elif kind == "uniform":
        out.uniform.low, out.uniform.high = value
    elif kind == "loguniform":
        out.log_uniform.low, out.log_uniform.high = value
    else:
        out.randint.low, out.randint.high = value
    return out


def load_experiment(path: str | Path) -> tuple[experiment_pb2.Experiment, str]:
    """An experiment spec file as (Experiment, experiment_id); SpecError otherwise."""
    path = Path(path)
    spec, node = _validated(ExperimentSpec, path)
    try:
        template, _ = job_from_spec(spec.trial, path.parent)
        experiment = experiment_pb2.Experiment(
            display_name=spec.display_name, trial_template=template,
            algorithm=f"SEARCH_ALGORITHM_{spec.algorithm.upper()}",
            num_samples=spec.num_samples, max_concurrent_trials=spec.max_concurrent_trials, metric=spec.metric,
            mode=f"METRIC_MODE_{spec.mode.upper()}", seed=spec.seed, labels=spec.labels,
        )
        for name, parameter in spec.search_space.items():
            experiment.search_space.parameters[name].CopyFrom(_distribution(name, parameter))
    except SpecError as error:
        field = str(error).split(":")[0]
        raise SpecError(f"{path}:{_line(node, tuple(field.split('.'))) or 1}: {error}") from None
    if spec.early_stopping is not None:
        asha = spec.early_stopping.asha
        experiment.early_stopping.asha.CopyFrom(experiment_pb2.AshaPolicy(
            time_attr=asha.time_attr, max_t=asha.max_t, grace_period=asha.grace_period,
            reduction_factor=asha.reduction_factor,
        ))
    return experiment, spec.name
