"""The integer rule shared by the trainer (user config), the scheduler (trial parameters) and the CLI."""

from __future__ import annotations

import math

import pytest

from paddleray.common.v1 import common_pb2
from paddleray.services.common import structs
from paddleray.services.scheduler import search
from paddleray.services.trainer.spec import run_spec

pytestmark = pytest.mark.unit


def test_integral_doubles_become_ints_and_the_rest_stays():
    struct = structs.to_struct({"epochs": 3, "lr": 0.5, "hidden_sizes": [128, 64], "nested": {"n": 2.0},
                                "big": 2.0**60, "name": "x", "flag": True, "none": None})
    assert structs.to_python(struct) == {"epochs": 3, "lr": 0.5, "hidden_sizes": [128, 64], "nested": {"n": 2},
                                         "big": 2.0**60, "name": "x", "flag": True, "none": None}
    value = structs.to_python(struct)
    assert type(value["epochs"]) is int and type(value["hidden_sizes"][0]) is int and type(value["big"]) is float
    assert structs.integral(math.inf) == math.inf and structs.integral(-0.0) == 0


def test_user_code_gets_ints_from_the_trainers_run_spec():
    spec = common_pb2.TrainingSpec(entrypoint="pkg.mod:fn", config=structs.to_struct({"hidden_sizes": [128], "epochs": 2}))
    config = run_spec(spec, ["pkg"]).config
    assert config == {"hidden_sizes": [128], "epochs": 2} and type(config["hidden_sizes"][0]) is int


def test_trial_parameters_show_integers():
    assert search.to_trial_parameters({"hidden_sizes": search._value(structs.to_struct({"v": [128]}).fields["v"])}) == {
        "hidden_sizes": "[128]"
    }
    merged = search.apply_to_config(structs.to_struct({"epochs": 4}), {"hidden_sizes": [128]})
    assert structs.to_python(merged) == {"epochs": 4, "hidden_sizes": [128]}
