"""Ports of deployments' own v2 endpoints, claimed in a real Redis: stable, unique, freed."""

from __future__ import annotations

import socket

import pytest

from paddleray.services.exporter import keys
from paddleray.services.exporter.direct_ports import DirectPorts, parse_range
from support.ports import free_port_range

pytestmark = pytest.mark.unit


def test_the_range_setting():
    assert parse_range("9100-9102") == range(9100, 9103) and parse_range("9100") == range(9100, 9101)
    assert parse_range("") == range(0)
    for bad in ("9102-9100", "0-10", "1-70000", "a-b"):
        with pytest.raises(ValueError):
            parse_range(bad)


async def test_each_deployment_keeps_one_port_of_its_own_and_ports_of_gone_ones_are_freed(raw_redis):
    ports = free_port_range(3)
    direct = DirectPorts(raw_redis, ports)
    first = await direct.assign(["a", "b"])
    assert sorted(first.values()) == [ports[0], ports[1]] and len(set(first.values())) == 2
    # Stable: a pass later, with a new deployment, nobody moves; another exporter replica agrees.
    again = await DirectPorts(raw_redis, ports).assign(["b", "a", "c"])
    assert again == {**first, "c": ports[2]} and await direct.assigned() == again
    # A full range leaves the newcomer without one (served through Serve's proxy only).
    assert "d" not in await direct.assign(["a", "b", "c", "d"])
    # "b" deleted: its port is freed and the next deployment may take it.
    after = await direct.assign(["a", "c", "d"])
    assert after["d"] == first["b"] and await raw_redis.hlen(keys.direct_ports()) == 3


async def test_a_port_something_else_listens_on_is_not_given(raw_redis):
    ports = free_port_range(2)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports[0]))
        taken.listen()
        assert await DirectPorts(raw_redis, ports).assign(["a"]) == {"a": ports[1]}


async def test_two_claims_of_one_deployment_end_as_one(raw_redis):
    """Two exporter replicas racing may each claim a port for it: the lowest is kept."""
    ports = free_port_range(2)
    await raw_redis.hset(keys.direct_ports(), mapping={str(ports[0]): "a", str(ports[1]): "a"})
    direct = DirectPorts(raw_redis, ports)
    assert await direct.assigned() == {"a": ports[0]}
    assert await direct.assign(["a"]) == {"a": ports[0]}
    assert await raw_redis.hgetall(keys.direct_ports()) == {str(ports[0]).encode(): b"a"}


async def test_off_when_the_range_is_empty(raw_redis):
    assert await DirectPorts(raw_redis, parse_range("")).assign(["a"]) == {}
