"""The Ray private APIs the services wrap (services/common/ray_private.py) still exist where it imports them.

If this fails after a Ray upgrade, the APIs moved: find their new home (or a public
replacement) and change ray_private.py, the one module that imports them.
"""

from __future__ import annotations

import inspect

import pytest

pytestmark = pytest.mark.unit


def test_available_resources_per_node_is_where_ray_private_imports_it():
    from ray._private.state import available_resources_per_node

    assert callable(available_resources_per_node)
    assert list(inspect.signature(available_resources_per_node).parameters) == []


def test_upload_working_dir_if_needed_takes_the_arguments_the_trainer_passes():
    from ray._private.runtime_env.working_dir import upload_working_dir_if_needed

    parameters = inspect.signature(upload_working_dir_if_needed).parameters
    assert {"runtime_env", "include_gitignore", "logger"} <= set(parameters)


def test_a_runtime_env_without_a_working_dir_passes_through_untouched():
    from paddleray.services.common import ray_private

    env = {"env_vars": {"A": "1"}}
    assert ray_private.upload_working_dir(env) == env


def test_the_auto_connect_switch_is_where_ray_private_sets_it():
    from ray._private import auto_init_hook

    assert isinstance(auto_init_hook.enable_auto_connect, bool)


@pytest.mark.integration
def test_the_drivers_gcs_client_answers_key_value_calls_with_a_timeout(ray_cluster):
    from paddleray.services.common import ray_private

    client = ray_private.gcs_client()
    client.internal_kv_put(b"ray-private-test", b"1", True, b"paddleray", timeout=10)
    assert client.internal_kv_get(b"ray-private-test", b"paddleray", timeout=10) == b"1"
