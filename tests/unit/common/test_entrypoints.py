"""The entrypoint rule: the allowlist, or a module file of the job's own package."""

from __future__ import annotations

import pytest

from paddleray.services.common import errors
from paddleray.services.common.entrypoints import check_entrypoint, check_form

pytestmark = pytest.mark.unit

ALLOW = ["paddleray.services.trainer.examples"]
FILES = ["my_trainer/__init__.py", "my_trainer/train.py", "helpers.py"]


def test_allowlisted_modules_run_without_a_package():
    assert check_entrypoint("paddleray.services.trainer.examples.digits_mlp:train", ALLOW) is False
    assert check_entrypoint("paddleray.services.trainer.examples.digits_mlp:train", ALLOW, FILES) is False


@pytest.mark.parametrize("entrypoint", ["my_trainer.train:train", "helpers:main", "my_trainer:main"])
def test_modules_of_the_package_run_as_package_code(entrypoint):
    assert check_entrypoint(entrypoint, ALLOW, FILES) is True


@pytest.mark.parametrize("entrypoint", ["os:system", "subprocess:run", "my_trainer.missing:train", "paddle.jit:save"])
def test_everything_else_is_denied_naming_the_field(entrypoint):
    with pytest.raises(errors.PermissionDenied, match=r"^job\.spec\.entrypoint: "):
        check_entrypoint(entrypoint, ALLOW, FILES, field="job.spec.entrypoint")
    with pytest.raises(errors.PermissionDenied, match="upload your code as a package"):
        check_entrypoint(entrypoint, ALLOW)


def test_malformed_entrypoint_is_invalid_argument():
    with pytest.raises(errors.InvalidArgument) as raised:
        check_entrypoint("my_trainer/train.py", ALLOW, FILES)
    assert raised.value.field == "spec.entrypoint"


@pytest.mark.parametrize("entrypoint", ["pkg.mod:fn", "a:b", "_p.q_1:run_2"])
def test_entrypoints_of_python_identifiers_pass(entrypoint):
    assert check_form(entrypoint, "spec.entrypoint") is None


@pytest.mark.parametrize("entrypoint", ["", "pkg.mod", "pkg.mod:", ":fn", "1pkg:fn", "pkg..mod:fn", "pkg.mod:fn()",
                                        "pkg.mod:fn\n", "pkg.mód:fn"])
def test_malformed_entrypoints_name_the_field_and_form(entrypoint):
    with pytest.raises(errors.InvalidArgument) as raised:
        check_form(entrypoint, "job.spec.entrypoint")
    assert raised.value.field == "job.spec.entrypoint"
    assert "package.module:function" in raised.value.rule
