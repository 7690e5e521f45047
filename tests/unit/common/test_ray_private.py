"""The Ray private APIs the services wrap (services/common/ray_private.py) still exist where it imports them.

If this fails after a Ray upgrade, the APIs moved: find their new home (or a public
replacement) and change ray_private.py, the one module that imports them.
"""

from __future__ import annotations

import asyncio
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


def test_serve_controller_running_names_the_actor_where_serve_declares_it():
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    assert SERVE_CONTROLLER_NAME and SERVE_NAMESPACE == "serve"


def test_the_driver_whose_gcs_client_ray_private_reads_is_where_it_looks():
    """Its gcs_client is set at ray.init: asked on a live driver in tests/integration/common/test_ray_private.py."""
    from ray._private import worker

    assert isinstance(worker.global_worker, worker.Worker)


def test_serves_cached_client_is_where_ray_private_gets_and_drops_it():
    from ray.serve import context

    assert callable(context._get_global_client) and callable(context._set_global_client)


def test_serves_client_answers_details_and_applies_a_declarative_config():
    from ray.serve._private.client import ServeControllerClient
    from ray.serve.schema import ServeDeploySchema

    assert list(inspect.signature(ServeControllerClient.get_serve_details).parameters) == ["self"]
    deploy = inspect.signature(ServeControllerClient.deploy_apps).parameters
    assert list(deploy)[:2] == ["self", "config"] and ServeDeploySchema.__name__ in str(deploy["config"].annotation)


def test_forget_serve_client_drops_the_cached_client():
    from ray.serve import context

    from paddleray.services.common import ray_private

    context._global_client = object()
    ray_private.forget_serve_client()
    assert context._global_client is None


def test_serves_grpc_server_takes_the_extra_options_exclusive_ports_corrects():
    from paddleray.services.common import ray_private

    server = ray_private.serve_grpc_server_class()
    assert "extra_options" in inspect.signature(server.__init__).parameters


def test_a_passthrough_service_is_registered_unrouted_on_serves_grpc_server():
    import grpc

    from paddleray.services.common import ray_private

    routed = []

    async def register() -> None:  # a grpc.aio server is made on a running loop, as Serve makes it
        server = ray_private.serve_grpc_server_class()(lambda **kw: routed.append(kw) or (lambda *a: None))
        ray_private.serve_passthrough_service(server, "grpc.reflection.v1.ServerReflection")
        handler = grpc.unary_unary_rpc_method_handler(lambda request, context: request)
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("grpc.reflection.v1.ServerReflection", {"Info": handler}),))
        await server.stop(None)

    asyncio.run(register())
    assert routed == []  # a routed service would have asked the factory for its handlers


def test_rays_serialization_context_calls_the_addons_that_defer_serialization_addons_replaces():
    from ray._private import serialization, worker
    from ray.util import serialization_addons

    assert list(inspect.signature(serialization_addons.apply).parameters) == ["serialization_context"]
    assert "serialization_addons.apply(self)" in inspect.getsource(serialization.SerializationContext.__init__)
    assert worker.WORKER_MODE != worker.SCRIPT_MODE


def test_serialization_addons_are_deferred_only_in_a_ray_worker_process():
    from ray.util import serialization_addons

    from paddleray.services.common import ray_private

    before = serialization_addons.apply
    assert ray_private.defer_serialization_addons() is False  # a test process is no Ray worker
    assert serialization_addons.apply is before


def test_the_after_import_hook_runs_once_right_after_its_module_is_executed(tmp_path, monkeypatch):
    import sys

    from paddleray.services.common import ray_private

    (tmp_path / "addon_target.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[object] = []
    hook = ray_private._AfterImport(frozenset({"addon_target"}), lambda: seen.append(sys.modules["addon_target"].VALUE))
    monkeypatch.setattr(sys, "meta_path", [hook, *sys.meta_path])
    monkeypatch.delitem(sys.modules, "addon_target", raising=False)
    import addon_target

    assert addon_target.VALUE == 42 and seen == [42]
    import json  # other modules are found as before, with no call

    assert json.dumps(1) == "1" and seen == [42]
