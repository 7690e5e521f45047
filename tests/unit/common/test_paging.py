"""Paging (AIP-158): sizes coerced to the maximum, opaque tokens bound to their filters."""

from __future__ import annotations

import base64

import pytest

from paddleray.services.common import paging
from paddleray.services.common.errors import InvalidArgument

pytestmark = pytest.mark.unit


def test_page_size_default_and_coercion():
    assert paging.page_size(0) == paging.DEFAULT_PAGE_SIZE
    assert paging.page_size(7) == 7
    assert paging.page_size(100_000) == paging.MAX_PAGE_SIZE
    assert paging.page_size(0, default=20, maximum=50) == 20
    assert paging.page_size(51, default=20, maximum=50) == 50


def test_negative_page_size_is_rejected_naming_the_field():
    with pytest.raises(InvalidArgument) as raised:
        paging.page_size(-1)
    assert raised.value.field == "page_size"


def test_token_round_trip_with_the_same_filters():
    filters = {"states": [2, 1], "labels": {"team": "a"}}
    token = paging.encode_page_token("000000000000001:job-1", filters)
    assert "job-1" not in token  # opaque: not the member in clear text
    assert paging.decode_page_token(token, filters) == "000000000000001:job-1"
    # Repeated filters are sets: the same states in another order are the same query.
    assert paging.decode_page_token(token, {"labels": {"team": "a"}, "states": [1, 2]}) == "000000000000001:job-1"


def test_empty_token_is_the_first_page():
    assert paging.decode_page_token("", {"x": 1}) is None


def test_token_reused_with_other_filters_is_rejected():
    token = paging.encode_page_token("p", {"states": [1]})
    with pytest.raises(InvalidArgument) as raised:
        paging.decode_page_token(token, {"states": [2]})
    assert raised.value.field == "page_token"
    assert "other filters" in raised.value.rule


@pytest.mark.parametrize(
    "token",
    ["garbage!", "e30", base64.urlsafe_b64encode(b'{"p": 1, "f": 2}').decode(), base64.urlsafe_b64encode(b"\xff\xfe").decode()],
)
def test_foreign_tokens_are_rejected(token):
    with pytest.raises(InvalidArgument) as raised:
        paging.decode_page_token(token, None, rpc="ListJobs")
    assert raised.value.field == "page_token"
    assert "ListJobs" in raised.value.rule


def test_a_byte_budget_always_takes_the_first_item_then_only_what_fits():
    budget = paging.ByteBudget(limit=10)
    assert budget.take(25), "a page holds at least one item, however large"
    assert not budget.take(1)
    budget = paging.ByteBudget(limit=10)
    assert budget.take(4) and budget.take(6)
    assert not budget.take(1)
    assert (budget.used, budget.items) == (10, 2)
