"""never_fits: the reason a job cannot run on a cluster even when it is empty."""

from __future__ import annotations

import pytest

from paddleray.common.v1 import common_pb2
from paddleray.services.scheduler.resources import never_fits
from paddleray.trainer.v1 import run_pb2
from paddleray.trainer.v1 import trainer_service_pb2 as ts

pytestmark = pytest.mark.unit


def _spec(cpus=1.0, gpus=0.0, workers=1, memory=0) -> common_pb2.TrainingSpec:
    return common_pb2.TrainingSpec(entrypoint="m:f", num_workers=workers, resources_per_worker=common_pb2.Resources(
        num_cpus=cpus, num_gpus=gpus, memory_bytes=memory))


def _cluster(*nodes: tuple[float, float, int]) -> ts.GetClusterResourcesResponse:
    amounts = [run_pb2.ResourceAmounts(num_cpus=c, num_gpus=g, memory_bytes=m) for c, g, m in nodes]
    total = run_pb2.ResourceAmounts(num_cpus=sum(a.num_cpus for a in amounts),
                                    num_gpus=sum(a.num_gpus for a in amounts),
                                    memory_bytes=sum(a.memory_bytes for a in amounts))
    return ts.GetClusterResourcesResponse(total=total, available=total, nodes=[
        run_pb2.NodeResources(node_id=f"n{i}", total=a, available=a) for i, a in enumerate(amounts)])


@pytest.mark.parametrize(("spec", "reason"), [
    (_spec(cpus=4, workers=16), "needs 64 CPUs; the cluster has 4"),
    (_spec(gpus=1), "needs 1 GPU; the cluster has 0"),
    (_spec(memory=16 << 30), "needs 16 GiB of memory; the cluster has 8 GiB"),
    (_spec(memory=5 << 30), "each worker needs 5 GiB of memory; the largest node has 4 GiB"),
    (_spec(cpus=3), "each worker needs 3 CPUs; the largest node has 2"),
    (_spec(cpus=2, workers=2), ""),
])
def test_reasons(spec, reason):
    cluster = _cluster((2, 0, 4 << 30), (2, 0, 4 << 30))
    assert never_fits(spec, cluster) == reason


def test_a_cluster_not_known_yet_is_not_judged():
    assert never_fits(_spec(cpus=64), ts.GetClusterResourcesResponse()) == ""
