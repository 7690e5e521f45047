"""Serve's direct-ingress gRPC server, as Serve builds it for a replica, does not share its port
once exclusive_ports is installed; without it, two bind the same port (Ray 2.60's string "0")."""

from __future__ import annotations

import asyncio

import pytest

from paddleray.services.exporter.serving.replica import exclusive_ports


async def _second_bind_on_the_same_port() -> bool:
    from ray.serve._private.grpc_util import gRPCGenericServer

    def server():
        # What serve/_private/grpc_util.start_grpc_server passes for enable_so_reuseport=False.
        return gRPCGenericServer(lambda *a: None, extra_options=[("grpc.so_reuseport", str(int(False)))])

    first = server()
    port = first.add_insecure_port("[::]:0")
    await first.start()
    try:
        second = server()
        try:
            second.add_insecure_port(f"[::]:{port}")
        except RuntimeError:
            return False
        await second.stop(0)
        return True
    finally:
        await first.stop(0)


def test_serves_string_option_shares_the_port_and_install_makes_it_exclusive(monkeypatch):
    from ray.serve._private.grpc_util import gRPCGenericServer

    monkeypatch.setattr(gRPCGenericServer, "__init__", gRPCGenericServer.__init__)  # undone after the test
    if getattr(gRPCGenericServer.__init__, "_paddleray_exclusive_ports", False):
        pytest.fail("installed before the test: the unpatched case cannot be checked")
    assert asyncio.run(_second_bind_on_the_same_port()), "Ray's own option now works: exclusive_ports can go"
    exclusive_ports.install()
    exclusive_ports.install()  # idempotent
    assert not asyncio.run(_second_bind_on_the_same_port())
