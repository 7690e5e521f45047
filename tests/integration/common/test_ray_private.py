"""The Ray private APIs the services wrap (services/common/ray_private.py) answer on a live
driver (their signatures, without Ray running: tests/unit/common/test_ray_private.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_the_drivers_gcs_client_answers_key_value_calls_with_a_timeout(ray_cluster):
    from paddleray.services.common import ray_private

    client = ray_private.gcs_client()
    client.internal_kv_put(b"ray-private-test", b"1", True, b"paddleray", timeout=10)
    assert client.internal_kv_get(b"ray-private-test", b"paddleray", timeout=10) == b"1"
