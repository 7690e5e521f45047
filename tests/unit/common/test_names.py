"""Resource names: one parser, INVALID_ARGUMENT naming the field for every malformed name."""

from __future__ import annotations

import pytest

from paddleray.services.common import names
from paddleray.services.common.errors import InvalidArgument

pytestmark = pytest.mark.unit


def test_parse_and_format_round_trip():
    assert names.JOB.parse("jobs/job-1") == {"job": "job-1"}
    assert names.JOB.parse_one("jobs/job-1") == "job-1"
    assert names.MODEL_VERSION.parse("models/digits/versions/12") == {"model": "digits", "version": "12"}
    assert names.MODEL_VERSION.format(model="digits", version=12) == "models/digits/versions/12"
    assert names.DEPLOYMENT.format(deployment="d") == "deployments/d"


@pytest.mark.parametrize(
    "name",
    ["", "jobs/", "jobs/Bad_Id", "jobs/1abc", "jobs/a/b", "runs/a", "jobs/" + "a" * 64, "jobs/a\n", " jobs/a", "jobs/a-"],
)
def test_malformed_job_names_name_the_field_and_form(name):
    with pytest.raises(InvalidArgument) as raised:
        names.JOB.parse(name, field="job")
    assert raised.value.field == "job"
    assert '"jobs/{job}"' in raised.value.rule


@pytest.mark.parametrize("name", ["models/m/versions/0", "models/m/versions/-1", "models/m/versions/x", "models/m"])
def test_version_numbers_start_at_one(name):
    with pytest.raises(InvalidArgument):
        names.MODEL_VERSION.parse(name)


def test_dots_in_ids_are_not_wildcards():
    pattern = names.ResourceName("a.b/{x}")
    assert pattern.parse("a.b/x1") == {"x": "x1"}
    with pytest.raises(InvalidArgument):
        pattern.parse("aXb/x1")


def test_check_id():
    assert names.check_id("job-1", "job_id") == "job-1"
    with pytest.raises(InvalidArgument) as raised:
        names.check_id("Job", "job_id")
    assert raised.value.field == "job_id"


def test_pattern_misuse_is_a_programming_error():
    with pytest.raises(ValueError):
        names.ResourceName("jobs/{job}", run=".*")
    with pytest.raises(ValueError):
        names.JOB.format(run="x")



def test_an_id_may_not_end_with_a_dash_and_may_be_63_characters():
    assert names.check_id("a" * 63, "job_id") == "a" * 63 and names.check_id("a-1", "job_id") == "a-1"
    with pytest.raises(InvalidArgument, match="not ending with '-'") as raised:
        names.check_id("job-", "job_id")
    assert raised.value.field == "job_id"
