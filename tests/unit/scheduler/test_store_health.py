"""Which Redis errors mean "the store is down" (UNAVAILABLE), and what the client is told."""

from __future__ import annotations

import pytest
from redis import exceptions as redis_errors

from paddleray.services.common import errors
from paddleray.services.scheduler import store_health

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("exc", [
    redis_errors.ConnectionError("Error 111 connecting to 127.0.0.1:6390. Connection refused."),
    redis_errors.TimeoutError("Timeout reading from socket"),
    redis_errors.AuthenticationError("invalid username-password pair or user is disabled."),
    redis_errors.ResponseError("NOAUTH Authentication required."),
    redis_errors.BusyLoadingError("Redis is loading the dataset in memory"),
    redis_errors.ReadOnlyError("You can't write against a read only replica."),
])
def test_store_outages_are_unavailable_and_say_nothing_of_the_address(exc):
    mapped = store_health.translate(exc)
    assert isinstance(mapped, errors.Unavailable)
    assert "127.0.0.1" not in mapped.message and "retry later" in mapped.message


def test_other_errors_are_left_to_the_interceptor():
    assert store_health.translate(redis_errors.ResponseError("WRONGTYPE Operation against a key")) is None
    assert store_health.translate(ValueError("a bug")) is None
