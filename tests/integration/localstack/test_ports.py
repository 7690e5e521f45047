"""Choose-then-bind that chooses again: a port taken between the choice and the bind costs a retry, not the run."""

from __future__ import annotations

import socket

import pytest

from paddleray.services.localstack import ports, redis_process
from paddleray.services.localstack.ports import PortTaken, start_on_free_ports
from paddleray.services.localstack.redis_process import RedisProcess, redis_reachable

pytestmark = pytest.mark.integration


@pytest.fixture
def taken_port():
    """A port another process holds (a plain listening socket), as Ray's processes do."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_redis_started_on_a_port_taken_in_the_meantime_comes_up_on_another(tmp_path, monkeypatch, taken_port):
    chosen = iter([taken_port])
    monkeypatch.setattr(redis_process, "free_port", lambda: next(chosen, None) or ports.free_port())
    server = RedisProcess(tmp_path).start()
    try:
        assert server.port != taken_port and redis_reachable(server.url)
        assert "Address already in use" in server.log_file.read_text(), "the first attempt lost the race"
        # A restart keeps the address it got.
        port = server.port
        server.kill()
        server.start()
        assert server.port == port and redis_reachable(server.url)
    finally:
        server.stop()


def test_a_configured_port_is_not_silently_replaced(tmp_path, taken_port):
    with pytest.raises(PortTaken):
        RedisProcess(tmp_path, port=taken_port).start()


def test_another_redis_on_the_port_is_not_taken_for_ours(tmp_path, redis_server):
    with pytest.raises(PortTaken):
        RedisProcess(tmp_path / "second", port=redis_server.port).start()
    assert redis_reachable(redis_server.url)


def test_start_on_free_ports_tries_again_only_on_a_taken_port():
    attempts = []

    def start():
        attempts.append(1)
        if len(attempts) < 3:
            raise PortTaken("taken")
        return "up"

    assert start_on_free_ports(start, "x") == "up" and len(attempts) == 3
    with pytest.raises(PortTaken):
        start_on_free_ports(lambda: (_ for _ in ()).throw(PortTaken("always")), "x", attempts=2)
    with pytest.raises(RuntimeError, match="other"):
        start_on_free_ports(lambda: (_ for _ in ()).throw(RuntimeError("other")), "x")
