"""node_fit: whether a job's workers fit the nodes (now, or even on the empty cluster), and why not."""

from __future__ import annotations

import pytest

from paddleray.common.v1 import common_pb2
from paddleray.services.scheduler.node_fit import Demand, NodeView, never_fits, place
from paddleray.trainer.v1 import run_pb2
from paddleray.trainer.v1 import trainer_service_pb2 as ts

pytestmark = pytest.mark.unit
S = common_pb2.PlacementStrategy


def _spec(cpus=1.0, gpus=0.0, workers=1, memory=0, strategy=S.PLACEMENT_STRATEGY_UNSPECIFIED) -> common_pb2.TrainingSpec:
    return common_pb2.TrainingSpec(entrypoint="m:f", num_workers=workers, placement_strategy=strategy,
                                   resources_per_worker=common_pb2.Resources(num_cpus=cpus, num_gpus=gpus,
                                                                            memory_bytes=memory))


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
    (_spec(cpus=0.5, workers=3, strategy=S.PLACEMENT_STRATEGY_STRICT_SPREAD),
     "3 workers on different nodes need 3 nodes with 0.5 CPUs; 2 have, even on the empty cluster"),
    (_spec(cpus=1, workers=3, strategy=S.PLACEMENT_STRATEGY_STRICT_PACK),
     "no node has 3 CPUs; largest: 2, even on the empty cluster"),
    (_spec(cpus=1, workers=4, strategy=S.PLACEMENT_STRATEGY_SPREAD), ""),
])
def test_never_fits_reasons(spec, reason):
    cluster = _cluster((2, 0, 4 << 30), (2, 0, 4 << 30))
    assert never_fits(spec, cluster) == reason


def test_custom_resources_no_node_has_or_too_few_of_say_so():
    cluster = _cluster((2, 0, 4 << 30), (2, 0, 4 << 30))
    for node in cluster.nodes:
        node.total.custom["accel"] = 1
    cluster.total.custom["accel"] = 2

    def asking(workers: int = 1, **custom: float) -> common_pb2.TrainingSpec:
        spec = _spec(cpus=1, workers=workers)
        spec.resources_per_worker.custom.update(custom)
        return spec

    assert never_fits(asking(tpu=1), cluster) == "needs resource 'tpu': no node has it"
    assert never_fits(asking(tpu=1), ts.GetClusterResourcesResponse(total=cluster.total)) == (
        "needs resource 'tpu': no node has it")  # also from a trainer that reports no nodes
    assert never_fits(asking(3, accel=1), cluster) == "needs 3 of resource 'accel'; the cluster has 2"
    assert never_fits(asking(accel=2), cluster) == "each worker needs 2 of accel; the largest node has 1"
    assert never_fits(asking(2, accel=1), cluster) == ""


def test_a_cluster_not_known_yet_is_not_judged():
    assert never_fits(_spec(cpus=64), ts.GetClusterResourcesResponse()) == ""


def _free(*cpus: float) -> list[dict[str, int]]:
    return [{"cpu_m": round(c * 1000), "gpu_m": 0, "mem": 8 << 30} for c in cpus]


def test_a_rank_needing_2_cpus_does_not_fit_two_nodes_with_1_free_each():
    view = NodeView(_free(1, 1))
    demand = Demand.of(_spec(cpus=2))
    assert not view.fits(demand)
    assert view.why_not(demand) == "no node has 2 CPUs free; largest free: 1"
    assert not view.take(demand) and view.free == _free(1, 1)


@pytest.mark.parametrize(("strategy", "nodes"), [
    (S.PLACEMENT_STRATEGY_PACK, [0, 0]),
    (S.PLACEMENT_STRATEGY_UNSPECIFIED, [0, 0]),
    (S.PLACEMENT_STRATEGY_SPREAD, [0, 1]),
    (S.PLACEMENT_STRATEGY_STRICT_SPREAD, [0, 1]),
    (S.PLACEMENT_STRATEGY_STRICT_PACK, [1, 1]),  # the tightest node that holds both
])
def test_placement_follows_the_strategy(strategy, nodes):
    assert place(Demand.of(_spec(cpus=0.5, workers=2, strategy=strategy)), _free(2, 1)) == nodes


def test_strict_spread_needs_a_node_per_worker_with_room():
    demand = Demand.of(_spec(cpus=0.5, workers=2, strategy=S.PLACEMENT_STRATEGY_STRICT_SPREAD))
    view = NodeView(_free(2, 0.25))
    assert not view.fits(demand)
    assert view.why_not(demand) == "2 workers on different nodes need 2 nodes with 0.5 CPUs free; 1 has"
    # Soft SPREAD takes what there is: both on the node with room.
    assert place(Demand.of(_spec(cpus=0.5, workers=2, strategy=S.PLACEMENT_STRATEGY_SPREAD)), _free(2, 0.25)) == [0, 0]


def test_fractional_workers_pack_exactly_and_bookings_add_up():
    view = NodeView(_free(1, 1))
    quarter = Demand.of(_spec(cpus=0.25))
    assert all(view.take(quarter) for _ in range(8))
    assert view.free == _free(0, 0) and not view.fits(quarter)
    assert view.why_not(quarter) == "no node has 0.25 CPUs free; largest free: 0"


def test_a_view_without_nodes_books_everything():
    view = NodeView([])
    assert view.fits(Demand.of(_spec(cpus=64))) and view.take(Demand.of(_spec(cpus=64)))


def test_a_worker_asking_for_a_node_label_fits_only_that_node():
    labelled = _free(1, 1)
    labelled[1]["custom:paddleray-node:node-2"] = 1000
    spec = _spec(cpus=0.5)
    spec.resources_per_worker.custom["paddleray-node:node-2"] = 0.01
    demand = Demand.of(spec)
    assert place(demand, labelled) == [1]
    view = NodeView(labelled)
    assert view.take(demand) and view.take(demand) and not view.fits(demand)
    # node-1 has the CPU, node-2 the label.
    assert view.why_not(demand) == "no node has 0.5 CPUs and 0.01 of paddleray-node:node-2 free at once"
    cluster = _cluster((2, 0, 4 << 30))
    assert never_fits(spec, cluster) == "needs resource 'paddleray-node:node-2': no node has it"
