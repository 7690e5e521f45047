"""Session-wide fixtures: a real redis-server and one shared local Ray cluster."""

from __future__ import annotations

import os

import pytest
import redis

from paddleray.services.localstack.ray_head import AUTH_ENV, RayHead
from paddleray.services.localstack.redis_process import RedisProcess

# Paddle logs compiler passes to stderr at length.
os.environ.setdefault("GLOG_v", "0")
os.environ.setdefault("GLOG_minloglevel", "2")
# Every Ray process of the session (head, test driver, services) uses token auth explicitly;
# left unset, Ray 2.60 enables it for some processes and not others, and they cannot talk.
for _key, _value in AUTH_ENV.items():
    os.environ.setdefault(_key, _value)


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
    head = RayHead(num_cpus=2).start()
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
