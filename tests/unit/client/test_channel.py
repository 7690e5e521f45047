"""The SDK's channels against a real TLS gRPC server (the gRPC health service, certificates made
with openssl): the CA from the config verifies the server, and the bearer token travels."""

from __future__ import annotations

import shutil
import subprocess
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from paddleray.services.client import ConfigError, ConnectionConfig, TlsConfig
from paddleray.services.client.channel import open_channel, service_config

pytestmark = pytest.mark.unit


@pytest.fixture
def tls_server(tmp_path):
    assert shutil.which("openssl"), "openssl makes the test certificate"
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    seen: list[tuple] = []

    class Recorder(grpc.ServerInterceptor):
        def intercept_service(self, continuation, details):
            seen.append(tuple(details.invocation_metadata))
            return continuation(details)

    server = grpc.server(futures.ThreadPoolExecutor(2), interceptors=[Recorder()])
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())]))
    server.start()
    yield f"127.0.0.1:{port}", cert, seen
    server.stop(0)


def _check(channel) -> int:
    return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status


def test_tls_with_the_configured_ca_and_the_token_in_metadata(tls_server):
    address, cert, seen = tls_server
    config = ConnectionConfig(address=address, token="s3cret", tls=TlsConfig(ca=str(cert)))
    with open_channel(address, config) as channel:
        assert _check(channel) == health_pb2.HealthCheckResponse.SERVING
    assert ("authorization", "Bearer s3cret") in seen[-1]
    with open_channel(address, ConnectionConfig(address=address)) as plaintext, pytest.raises(grpc.RpcError):
        _check(plaintext)


def test_a_missing_ca_file_is_a_config_error(tmp_path):
    config = ConnectionConfig(address="x:1", tls=TlsConfig(ca=str(tmp_path / "nope.pem")))
    with pytest.raises(ConfigError, match="TLS CA file"):
        open_channel("x:1", config)


def test_unary_calls_retry_unavailable_by_service_config():
    assert '"retryableStatusCodes": ["UNAVAILABLE"]' in service_config()
