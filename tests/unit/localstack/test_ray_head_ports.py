"""The component ports a Ray head is started with: distinct, and never its own GCS port."""

from __future__ import annotations

from paddleray.services.localstack import ray_head


def test_component_ports_skip_the_heads_own_and_repeated_ports(monkeypatch):
    # A head restarted on its fixed port does not listen on it yet, so free_port() may hand it
    # out; ray start then refuses to start (two components on one port).
    offered = iter([6379, 7000, 7000, 8000, 9000, 6380, 9001])
    monkeypatch.setattr(ray_head, "free_port", lambda: next(offered))
    assert ray_head._other_free_ports(4, {6379, 6380, None}) == [7000, 8000, 9000, 9001]


def test_there_is_a_port_for_every_component_flag():
    ports = ray_head._other_free_ports(len(ray_head._COMPONENT_PORT_FLAGS), {None})
    assert len(set(ports)) == len(ray_head._COMPONENT_PORT_FLAGS)
