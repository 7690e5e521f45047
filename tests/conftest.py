"""Session-wide fixtures: a real redis-server and one shared local Ray cluster; and each test's
category marker, from its directory.

Every test is in one category, the top directory it lives in: tests/unit -> `unit`,
tests/integration -> `integration`, tests/e2e -> `e2e`, tests/reliability -> `reliability`
(README: `make test PYTEST_ARGS="-m integration"`). So those markers together select every
test; a test outside these directories, or one marked with another directory's category, stops
the collection (tests/unit/test_markers.py checks both, on this tree and on a planted one).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redis

from paddleray.services.localstack.ray_head import AUTH_ENV, RayHead
from paddleray.services.localstack.redis_process import RedisProcess
from support.paddle_modes import paddle_stays_dynamic  # noqa: F401 - autouse: no test leaves Paddle static

# Paddle logs compiler passes to stderr at length.
os.environ.setdefault("GLOG_v", "0")
os.environ.setdefault("GLOG_minloglevel", "2")
# Every Ray process of the session (head, test driver, services) uses token auth explicitly;
# left unset, Ray 2.60 enables it for some processes and not others, and they cannot talk.
for _key, _value in AUTH_ENV.items():
    os.environ.setdefault(_key, _value)


TESTS = Path(__file__).resolve().parent
CATEGORIES = ("unit", "integration", "e2e", "reliability")


def _category(path: Path) -> str | None:
    parts = path.resolve().relative_to(TESTS).parts
    return parts[0] if len(parts) > 1 and parts[0] in CATEGORIES else None


def pytest_collection_modifyitems(config, items):
    misplaced = []
    for item in items:
        category = _category(item.path)
        others = {m.name for m in item.iter_markers() if m.name in CATEGORIES} - {category}
        if category is None or others:
            misplaced.append(f"{item.nodeid} (in {category or 'no category directory'}, marked {sorted(others)})"
                             if others else f"{item.nodeid} (not under tests/{{{','.join(CATEGORIES)}}}/)")
            continue
        item.add_marker(category)
    if misplaced:
        raise pytest.UsageError("each test's category is its directory; move these:\n  " + "\n  ".join(misplaced))


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory) -> RedisProcess:
    server = RedisProcess(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisProcess) -> str:
    """URL of an empty Redis database (flushed before the test)."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return redis_server.url


@pytest.fixture(scope="session")
def ray_head() -> RayHead:
    """One Ray head for the whole test session (2 CPUs), shared by in-process and e2e tests."""
    head = RayHead(num_cpus=2).start(timeout=300)  # a loaded host registers a raylet late
    yield head
    head.stop()


@pytest.fixture(scope="session")
def ray_cluster(ray_head: RayHead) -> str:
    """The test process connected to the shared Ray head as a driver; yields its address."""
    import ray

    ray.init(address=ray_head.address, log_to_driver=False)
    yield ray_head.address
    ray.shutdown()


@pytest.fixture
def fault_figures(request):
    """Records a fault-injection test's figures for the reliability report (support.results);
    the previous run's are removed first, so only a passing run leaves figures."""
    from support.results import FaultFigures

    figures = FaultFigures(request.node.nodeid)
    figures.clear()
    return figures


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 API server (moto's server mode) for the session; see tests/support/s3.py."""
    from support.s3 import start_server

    server, s3 = start_server()
    yield s3
    server.stop()
