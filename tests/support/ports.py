"""Ports for tests that need several at once."""

from __future__ import annotations

from paddleray.services.exporter.direct_ports import bindable
from paddleray.services.localstack.ports import free_port


def free_port_range(size: int) -> range:
    """`size` consecutive ports nothing listens on now (retried: another process may hold one)."""
    for _ in range(50):
        first = free_port()
        ports = range(first, first + size)
        if ports.stop <= 65536 and all(bindable("127.0.0.1", p) for p in ports):
            return ports
    raise AssertionError("no free port range")
