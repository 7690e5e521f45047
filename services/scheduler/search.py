"""Search spaces: validate an experiment's space and expand it into trial parameter sets.

Semantics follow Ray Tune's BasicVariantGenerator so that sweeps ported from Tune behave the
same: with GRID, the cross-product of the grid parameters is repeated num_samples times and the
other parameters are drawn anew for every trial; with RANDOM, num_samples independent draws,
grid parameters drawn uniformly from their values. Draws come from one seeded generator, in a
fixed order (sorted keys), so the same experiment always expands to the same plan.

A trial's parameters are a dict from config key to a JSON value; dotted keys ("optimizer.lr")
address nested config values.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from typing import Any

from google.protobuf import struct_pb2

from paddleray.scheduler.v1 import experiment_pb2
from paddleray.services.common import structs, training_spec
from paddleray.services.common.errors import InvalidArgument

# A plan is stored whole in Redis and every trial job is created from it: keep it bounded.
MAX_TRIALS = 10_000
MAX_NUM_SAMPLES = 10_000
MAX_PARAMETERS = 256
MAX_VALUES = 10_000
_MAX_RANDINT = 2**53

_KEY_SEGMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_SPACE = "experiment.search_space.parameters"

TrialParameters = dict[str, Any]


def _value(value: struct_pb2.Value) -> Any:
    return structs.to_python(value)


def _check_key(key: str) -> None:
    if not key or not all(_KEY_SEGMENT.match(segment) for segment in key.split(".")):
        raise InvalidArgument(
            f"{_SPACE}[{key}]", "key must be dot-separated names of [A-Za-z0-9_-] starting with a letter or _"
        )


def _check_prefixes(keys: list[str]) -> None:
    """'a' and 'a.b' cannot both be set: one would overwrite the other's object."""
    present = set(keys)
    for key in keys:
        parts = key.split(".")
        for i in range(1, len(parts)):
            prefix = ".".join(parts[:i])
            if prefix in present:
                raise InvalidArgument(f"{_SPACE}[{key}]", f"conflicts with parameter {prefix!r}, which sets its parent")


def _check_distribution(key: str, dist: experiment_pb2.ParameterDistribution) -> None:
    field = f"{_SPACE}[{key}]"
    kind = dist.WhichOneof("kind")
    if kind is None:
        raise InvalidArgument(field, "must set one of grid, choice, uniform, log_uniform, randint")
    if kind in ("grid", "choice"):
        values = getattr(dist, kind).values
        if not values:
            raise InvalidArgument(f"{field}.{kind}.values", "must have at least one value")
        if len(values) > MAX_VALUES:
            raise InvalidArgument(f"{field}.{kind}.values", f"at most {MAX_VALUES} values")
        for i, value in enumerate(values):
            if value.WhichOneof("kind") is None:
                raise InvalidArgument(f"{field}.{kind}.values[{i}]", "must be set")
            training_spec.check_struct_values(value, f"{field}.{kind}.values[{i}]")
    elif kind == "uniform":
        low, high = dist.uniform.low, dist.uniform.high
        if not math.isfinite(low):
            raise InvalidArgument(f"{field}.uniform.low", "must be finite")
        if not math.isfinite(high):
            raise InvalidArgument(f"{field}.uniform.high", "must be finite")
        if not high > low:
            raise InvalidArgument(f"{field}.uniform.high", "must be > low")
        if not math.isfinite(high - low):
            # A draw is low + u * (high - low): the width itself must be a number.
            raise InvalidArgument(f"{field}.uniform", "high - low must be finite (at most about 1.8e308)")
    elif kind == "log_uniform":
        low, high = dist.log_uniform.low, dist.log_uniform.high
        if not (math.isfinite(low) and low > 0):
            raise InvalidArgument(f"{field}.log_uniform.low", "must be > 0")
        if not math.isfinite(high):
            raise InvalidArgument(f"{field}.log_uniform.high", "must be finite")
        if not high > low:
            raise InvalidArgument(f"{field}.log_uniform.high", "must be > low")
    elif kind == "randint":
        if not dist.randint.high > dist.randint.low:
            raise InvalidArgument(f"{field}.randint.high", "must be > low")
        for bound in ("low", "high"):
            # Beyond 2**53 a JSON number (a Struct's double) no longer holds the integer drawn.
            if abs(getattr(dist.randint, bound)) > _MAX_RANDINT:
                raise InvalidArgument(f"{field}.randint.{bound}", f"magnitude must be at most 2**53 ({_MAX_RANDINT})")


def resolve_algorithm(experiment: experiment_pb2.Experiment) -> int:
    """The algorithm to use: the one asked for, else GRID when the space has grid parameters."""
    algorithm = experiment.algorithm
    if algorithm not in experiment_pb2.SearchAlgorithm.values():
        raise InvalidArgument("experiment.algorithm", f"unknown value {algorithm}")
    if algorithm != experiment_pb2.SEARCH_ALGORITHM_UNSPECIFIED:
        return algorithm
    has_grid = any(d.WhichOneof("kind") == "grid" for d in experiment.search_space.parameters.values())
    return experiment_pb2.SEARCH_ALGORITHM_GRID if has_grid else experiment_pb2.SEARCH_ALGORITHM_RANDOM


def num_samples(experiment: experiment_pb2.Experiment) -> int:
    samples = experiment.num_samples or 1
    if not 1 <= samples <= MAX_NUM_SAMPLES:
        raise InvalidArgument("experiment.num_samples", f"must be between 1 and {MAX_NUM_SAMPLES}")
    return samples


def count_trials(experiment: experiment_pb2.Experiment) -> int:
    """Trials the experiment expands to, without drawing them (validates first)."""
    validate(experiment)
    return _count(experiment)


def _count(experiment: experiment_pb2.Experiment) -> int:
    samples = num_samples(experiment)
    if resolve_algorithm(experiment) == experiment_pb2.SEARCH_ALGORITHM_RANDOM:
        return samples
    grid = 1
    for dist in experiment.search_space.parameters.values():
        if dist.WhichOneof("kind") == "grid":
            grid *= len(dist.grid.values)
    return grid * samples


def validate(experiment: experiment_pb2.Experiment) -> None:
    """Raises InvalidArgument naming the first field of the space that breaks a rule."""
    parameters = experiment.search_space.parameters
    if not parameters:
        raise InvalidArgument(_SPACE, "must have at least one parameter")
    if len(parameters) > MAX_PARAMETERS:
        raise InvalidArgument(_SPACE, f"at most {MAX_PARAMETERS} parameters")
    keys = sorted(parameters)
    for key in keys:
        _check_key(key)
        _check_distribution(key, parameters[key])
    _check_prefixes(keys)
    resolve_algorithm(experiment)
    total = _count(experiment)
    if total > MAX_TRIALS:
        raise InvalidArgument(
            "experiment.num_samples", f"grid combinations x num_samples must be <= {MAX_TRIALS} (got {total})"
        )


def _draw(dist: experiment_pb2.ParameterDistribution, rng: random.Random) -> Any:
    kind = dist.WhichOneof("kind")
    if kind in ("grid", "choice"):
        values = getattr(dist, kind).values
        return _value(values[rng.randrange(len(values))])
    if kind == "uniform":
        return dist.uniform.low + rng.random() * (dist.uniform.high - dist.uniform.low)
    if kind == "log_uniform":
        low, high = math.log(dist.log_uniform.low), math.log(dist.log_uniform.high)
        return math.exp(low + rng.random() * (high - low))
    return rng.randrange(dist.randint.low, dist.randint.high)


def expand(experiment: experiment_pb2.Experiment) -> list[TrialParameters]:
    """Validates the space and returns every trial's parameters, in trial-index order."""
    validate(experiment)
    parameters = experiment.search_space.parameters
    keys = sorted(parameters)
    rng = random.Random(experiment.seed)
    samples = num_samples(experiment)
    if resolve_algorithm(experiment) == experiment_pb2.SEARCH_ALGORITHM_RANDOM:
        return [{key: _draw(parameters[key], rng) for key in keys} for _ in range(samples)]
    grid_keys = [key for key in keys if parameters[key].WhichOneof("kind") == "grid"]
    random_keys = [key for key in keys if key not in grid_keys]
    grid_values = [[_value(v) for v in parameters[key].grid.values] for key in grid_keys]
    trials: list[TrialParameters] = []
    # Sample-major like Tune: the whole grid once per sample.
    for _ in range(samples):
        for combination in itertools.product(*grid_values):
            trial = dict(zip(grid_keys, combination, strict=True))
            trial.update({key: _draw(parameters[key], rng) for key in random_keys})
            trials.append({key: trial[key] for key in keys})
    return trials


def apply_to_config(config: struct_pb2.Struct, parameters: TrialParameters) -> struct_pb2.Struct:
    """A copy of config with the trial's values set; dotted keys set nested values."""
    merged = structs.to_python(config)
    for key, value in parameters.items():
        node = merged
        parts = key.split(".")
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise InvalidArgument(
                    f"{_SPACE}[{key}]",
                    f"trial_template.spec.config.{'.'.join(parts[: depth + 1])} is not an object",
                )
            node = child
        node[parts[-1]] = value
    result = struct_pb2.Struct()
    result.update(merged)
    return result


def to_trial_parameters(parameters: TrialParameters) -> dict[str, str]:
    """Job.trial_parameters form: each value as JSON text (the proto map holds strings)."""
    return {key: json.dumps(value) for key, value in parameters.items()}
