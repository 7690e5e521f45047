"""Search-space validation and grid/random expansion (Ray Tune's semantics), seeded."""

from __future__ import annotations

import math

import pytest
from google.protobuf import json_format, struct_pb2

from paddleray.scheduler.v1 import experiment_pb2
from paddleray.services.common.errors import InvalidArgument
from paddleray.services.scheduler import search

pytestmark = pytest.mark.unit


def _values(*items) -> list[struct_pb2.Value]:
    out = []
    for item in items:
        value = struct_pb2.Value()
        if isinstance(item, str):
            value.string_value = item
        elif isinstance(item, bool):
            value.bool_value = item
        else:
            value.number_value = item
        out.append(value)
    return out


def _experiment(num_samples=0, seed=0, algorithm=0, **params) -> experiment_pb2.Experiment:
    exp = experiment_pb2.Experiment(num_samples=num_samples, seed=seed, algorithm=algorithm)
    for key, dist in params.items():
        exp.search_space.parameters[key.replace("__", ".")].CopyFrom(dist)
    return exp


def grid(*items):
    return experiment_pb2.ParameterDistribution(grid=experiment_pb2.GridSearch(values=_values(*items)))


def choice(*items):
    return experiment_pb2.ParameterDistribution(choice=experiment_pb2.Choice(values=_values(*items)))


def uniform(low, high):
    return experiment_pb2.ParameterDistribution(uniform=experiment_pb2.Uniform(low=low, high=high))


def loguniform(low, high):
    return experiment_pb2.ParameterDistribution(log_uniform=experiment_pb2.LogUniform(low=low, high=high))


def randint(low, high):
    return experiment_pb2.ParameterDistribution(randint=experiment_pb2.RandInt(low=low, high=high))


def test_grid_is_the_cross_product_repeated_num_samples_times_with_random_params_drawn_anew():
    exp = _experiment(num_samples=3, seed=7, lr=grid(0.1, 0.01), layers=grid(1, 2, 3), dropout=uniform(0.0, 0.5))
    trials = search.expand(exp)
    assert len(trials) == 2 * 3 * 3 == search.count_trials(exp)
    combos = [(t["lr"], t["layers"]) for t in trials]
    # Each of the 6 combinations appears once per sample, the whole grid per sample (Tune's order).
    assert sorted(set(combos)) == sorted({(lr, n) for lr in (0.1, 0.01) for n in (1, 2, 3)})
    assert all(combos.count(c) == 3 for c in set(combos))
    assert combos[:6] == combos[6:12] == combos[12:]
    dropouts = [t["dropout"] for t in trials]
    assert len(set(dropouts)) == len(dropouts)
    assert all(0.0 <= d < 0.5 for d in dropouts)


def test_random_draws_num_samples_trials_and_grid_values_uniformly():
    exp = _experiment(
        num_samples=200,
        seed=1,
        algorithm=experiment_pb2.SEARCH_ALGORITHM_RANDOM,
        opt=grid("sgd", "adam"),
        lr=loguniform(1e-4, 1e-1),
        batch=randint(16, 20),
        act=choice("relu", "tanh", "gelu"),
    )
    trials = search.expand(exp)
    assert len(trials) == 200
    assert {t["opt"] for t in trials} == {"sgd", "adam"}
    assert {t["act"] for t in trials} == {"relu", "tanh", "gelu"}
    assert {t["batch"] for t in trials} == {16, 17, 18, 19}
    assert all(isinstance(t["batch"], int) for t in trials)
    lrs = [t["lr"] for t in trials]
    assert all(1e-4 <= lr < 1e-1 for lr in lrs)
    # Log-uniform: about a third of the draws per decade.
    low_decade = sum(1 for lr in lrs if lr < 1e-3)
    assert 40 <= low_decade <= 95


def test_algorithm_defaults_to_grid_only_when_the_space_has_grid_parameters():
    assert search.resolve_algorithm(_experiment(a=grid(1, 2))) == experiment_pb2.SEARCH_ALGORITHM_GRID
    assert search.resolve_algorithm(_experiment(a=choice(1, 2))) == experiment_pb2.SEARCH_ALGORITHM_RANDOM
    assert len(search.expand(_experiment(a=choice(1, 2)))) == 1


def test_same_seed_repeats_the_sweep_and_another_seed_does_not():
    def make(seed):
        return _experiment(num_samples=5, seed=seed, lr=loguniform(1e-5, 1.0), n=randint(0, 1000))

    assert search.expand(make(42)) == search.expand(make(42))
    assert search.expand(make(42)) != search.expand(make(43))


def test_dotted_keys_set_nested_config_values_and_keep_the_rest():
    config = struct_pb2.Struct()
    config.update({"optimizer": {"name": "adam", "lr": 1.0}, "epochs": 3})
    merged = search.apply_to_config(config, {"optimizer.lr": 0.01, "model.hidden": 64})
    as_dict = json_format.MessageToDict(merged)
    assert as_dict["optimizer"] == {"name": "adam", "lr": 0.01}
    assert as_dict["model"] == {"hidden": 64}
    assert as_dict["epochs"] == 3
    # The template itself is untouched.
    assert config["optimizer"]["lr"] == 1.0


def test_dotted_key_under_a_scalar_config_value_is_rejected():
    config = struct_pb2.Struct()
    config.update({"optimizer": "adam"})
    with pytest.raises(InvalidArgument) as info:
        search.apply_to_config(config, {"optimizer.lr": 0.01})
    assert info.value.field == "experiment.search_space.parameters[optimizer.lr]"


def test_trial_parameters_are_json_text():
    assert search.to_trial_parameters({"lr": 0.5, "opt": "sgd", "n": 3}) == {"lr": "0.5", "opt": '"sgd"', "n": "3"}


@pytest.mark.parametrize(
    ("exp", "field", "rule"),
    [
        (_experiment(), "experiment.search_space.parameters", "at least one parameter"),
        (
            _experiment(lr=loguniform(0.0, 1.0)),
            "experiment.search_space.parameters[lr].log_uniform.low",
            "must be > 0",
        ),
        (
            _experiment(lr=loguniform(0.1, 0.01)),
            "experiment.search_space.parameters[lr].log_uniform.high",
            "must be > low",
        ),
        (_experiment(x=uniform(1.0, 1.0)), "experiment.search_space.parameters[x].uniform.high", "must be > low"),
        (_experiment(x=uniform(math.nan, 1.0)), "experiment.search_space.parameters[x].uniform.low", "finite"),
        (_experiment(x=uniform(0, math.inf)), "experiment.search_space.parameters[x].uniform.high", "finite"),
        (_experiment(n=randint(5, 5)), "experiment.search_space.parameters[n].randint.high", "must be > low"),
        (_experiment(g=grid()), "experiment.search_space.parameters[g].grid.values", "at least one value"),
        (_experiment(c=choice()), "experiment.search_space.parameters[c].choice.values", "at least one value"),
        (
            _experiment(x=experiment_pb2.ParameterDistribution()),
            "experiment.search_space.parameters[x]",
            "must set one of",
        ),
        (_experiment(**{"a": grid(1), "a__b": grid(2)}), "experiment.search_space.parameters[a.b]", "conflicts"),
        (_experiment(**{"a__": grid(1)}), "experiment.search_space.parameters[a.]", "key must be"),
        (_experiment(num_samples=-1, a=grid(1)), "experiment.num_samples", "between 1 and"),
        (_experiment(num_samples=10_001, a=grid(1)), "experiment.num_samples", "between 1 and"),
        (_experiment(num_samples=5000, a=grid(1, 2, 3)), "experiment.num_samples", "<= 10000 (got 15000)"),
        (_experiment(algorithm=9, a=grid(1)), "experiment.algorithm", "unknown value"),
    ],
)
def test_bad_spaces_are_rejected_naming_the_field_and_the_rule(exp, field, rule):
    with pytest.raises(InvalidArgument) as info:
        search.expand(exp)
    assert info.value.field == field
    assert rule in info.value.rule


@pytest.mark.parametrize(
    ("distribution", "field", "rule"),
    [
        (grid(0.1, math.nan), "experiment.search_space.parameters[lr].grid.values[1]", "finite"),
        (choice(math.inf), "experiment.search_space.parameters[lr].choice.values[0]", "finite"),
        # A draw is low + u * (high - low): the width overflowed to infinity.
        (uniform(-1e308, 1e308), "experiment.search_space.parameters[lr].uniform", "finite"),
        (randint(0, 2**60), "experiment.search_space.parameters[lr].randint.high", "2**53"),
    ],
)
def test_values_the_trials_could_not_carry_are_rejected(distribution, field, rule):
    with pytest.raises(InvalidArgument) as info:
        search.validate(_experiment(lr=distribution))
    assert info.value.field == field and rule in info.value.rule


def test_grid_values_and_parameters_are_bounded():
    with pytest.raises(InvalidArgument) as info:
        search.validate(_experiment(lr=grid(*range(search.MAX_VALUES + 1))))
    assert info.value.field.endswith("grid.values") and "at most" in info.value.rule
    many = {f"p{i}": choice(1) for i in range(search.MAX_PARAMETERS + 1)}
    with pytest.raises(InvalidArgument) as info:
        search.validate(_experiment(**many))
    assert info.value.field == "experiment.search_space.parameters" and "at most" in info.value.rule
