"""What the whole cluster could never place is told apart from what waits for resources."""

from __future__ import annotations

import pytest

from paddleray.common.v1 import common_pb2
from paddleray.exporter.v1 import deployment_pb2
from paddleray.services.exporter.deploy.capacity import never_fits

pytestmark = pytest.mark.unit
TWO_NODES = [{"CPU": 2.0, "memory": 8 * 2**30}, {"CPU": 1.0, "GPU": 1.0, "memory": 4 * 2**30, "node:x": 1.0}]


def deployment(replicas=0, cpus=0.0, gpus=0.0, memory=0, custom=None, autoscaling=None):
    d = deployment_pb2.Deployment(num_replicas=replicas, resources_per_replica=common_pb2.Resources(
        num_cpus=cpus, num_gpus=gpus, memory_bytes=memory, custom=custom or {}))
    if autoscaling is not None:
        d.autoscaling.CopyFrom(deployment_pb2.AutoscalingConfig(min_replicas=autoscaling[0], max_replicas=autoscaling[1]))
    return d


@pytest.mark.parametrize("d, reason", [
    (deployment(replicas=4), "4 replicas need 4 CPUs; the cluster has 3"),
    (deployment(cpus=64), "1 replica needs 64 CPUs; the cluster has 3"),
    (deployment(replicas=2, gpus=1), "2 replicas need 2 GPUs; the cluster has 1"),
    (deployment(cpus=2.5), "each replica needs 2.5 CPUs; the largest node has 2"),
    (deployment(replicas=2, cpus=1.5), "the nodes have room for 1 of its 2 replicas"),
    (deployment(memory=16 * 2**30), "1 replica needs 16 GiB of memory; the cluster has 12 GiB"),
    (deployment(custom={"node:y": 1}), "resource 'node:y'; no node of the cluster has it"),
    (deployment(autoscaling=(7, 10), cpus=0.5), "7 replicas need 3.5 CPUs; the cluster has 3"),
])
def test_more_than_the_cluster_has_is_said_with_the_figures(d, reason):
    assert reason in never_fits(d, TWO_NODES)


@pytest.mark.parametrize("d", [
    deployment(replicas=3), deployment(replicas=6, cpus=0.5), deployment(gpus=1), deployment(custom={"node:x": 1}),
    deployment(autoscaling=(0, 64), cpus=1),  # only the fewest replicas must fit
])
def test_what_fits_the_empty_cluster_is_not_refused(d):
    assert never_fits(d, TWO_NODES) == ""


def test_unknown_nodes_judge_nothing():
    assert never_fits(deployment(cpus=1000), None) == "" and never_fits(deployment(cpus=1000), []) == ""
