"""One way to connect, checked over services/: gRPC channels are made only in
services/common/channels.py, a service dials another service only through peers.PeerSettings,
and Redis clients are made only in services/common/redis_client.py.

So TLS, tokens and Redis credentials configured once reach every client: the exporter once
dialled the scheduler with a plaintext channel of its own, and a TLS stack answered its
exports from a job with UNAVAILABLE.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SERVICES = Path(__file__).resolve().parents[3] / "services"
CHANNELS = "common/channels.py"
PEERS = "common/peers.py"
REDIS = "common/redis_client.py"
# The packages of the three services: they dial one another only through their PeerSettings.
SERVICE_PACKAGES = ("scheduler/", "trainer/", "exporter/")

CHANNEL_MAKERS = {"insecure_channel", "secure_channel"}
REDIS_MAKERS = {"Redis", "StrictRedis", "from_url", "ConnectionPool", "BlockingConnectionPool", "RedisCluster"}


def _called_names(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of each call, the name being the called function's last component."""
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            calls.append((node.lineno, name))
    return calls


def _channel_makers_named(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of each mention of grpc's channel makers: called, passed on, or imported
    (under any alias), so `from grpc.aio import insecure_channel as dial` is seen too."""
    named = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in CHANNEL_MAKERS:
            named.append((node.lineno, node.attr))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "grpc":
            named += [(node.lineno, a.name) for a in node.names if a.name in CHANNEL_MAKERS]
    return named


def violations(relative: str, source: str) -> list[str]:
    """The module's breaches of the rules above, as "path:line: what"."""
    found = []
    tree = ast.parse(source)
    if relative != CHANNELS:
        found += [f"{relative}:{line}: {name}() outside {CHANNELS} (use open_channel / open_blocking_channel)"
                  for line, name in _channel_makers_named(tree)]
    for line, name in _called_names(tree):
        where = f"{relative}:{line}"
        if name in REDIS_MAKERS and relative != REDIS:
            found.append(f"{where}: {name}() outside {REDIS} (use redis_client.connect)")
        if name == "open_channel" and relative.startswith(SERVICE_PACKAGES):
            found.append(f"{where}: a service dials a peer outside {PEERS} (use its PeerSettings.dial())")
    return found


def test_no_module_of_services_connects_another_way():
    modules = sorted(SERVICES.rglob("*.py"))
    assert len(modules) > 50  # the tree was found
    found = [v for path in modules for v in violations(str(path.relative_to(SERVICES)), path.read_text())]
    assert found == []


@pytest.mark.parametrize(("relative", "source", "rule"), [
    ("exporter/export/sources.py", "from grpc import aio\nchannel = aio.insecure_channel(address)\n", "insecure_channel"),
    ("trainer/x.py", "import grpc\nc = grpc.secure_channel(a, creds)\n", "secure_channel"),
    ("cli/x.py", "import grpc\nmake = grpc.insecure_channel\n", "insecure_channel"),
    ("client/x.py", "import os\nfrom grpc.aio import insecure_channel as dial\n", "insecure_channel"),
    ("exporter/app.py", "import redis.asyncio as r\nclient = r.Redis.from_url(url)\n", "from_url"),
    ("localstack/x.py", "import redis\nclient = redis.Redis(host='h')\n", "Redis"),
    ("scheduler/x.py", "from paddleray.services.common.channels import open_channel\nc = open_channel(a)\n",
     "peers.py"),
])
def test_a_planted_violation_is_found(relative, source, rule):
    found = violations(relative, source)
    assert len(found) == 1 and rule in found[0] and found[0].startswith(f"{relative}:2:")


def test_the_modules_that_own_a_rule_may_do_what_it_reserves():
    assert violations(CHANNELS, "import grpc\nc = grpc.insecure_channel(a)\n") == []
    assert violations(REDIS, "import redis\nc = redis.Redis.from_url(u)\n") == []
    assert violations(PEERS, "c = open_channel(a)\n") == []
