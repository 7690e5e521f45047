"""explain_placement: what a pending run's placement group waits for, from Ray's resource view."""

from __future__ import annotations

import pytest

from paddleray.services.trainer.placement import explain_placement

pytestmark = pytest.mark.unit

NODE = {"CPU": 2.0, "memory": 8 * 2**30}
TWO_NODES = [NODE, NODE]
TOTAL = {"CPU": 4.0, "memory": 16 * 2**30}


def placement_hint(*args) -> str:
    return explain_placement(*args).text


def test_only_what_the_cluster_can_never_hold_is_impossible():
    assert explain_placement({"CPU": 64.0}, 1, "PACK", TOTAL, TOTAL, TWO_NODES).impossible
    assert explain_placement({"CPU": 3.0}, 1, "PACK", TOTAL, TOTAL, TWO_NODES).impossible
    assert explain_placement({"CPU": 1.5}, 2, "STRICT_PACK", TOTAL, TOTAL, TWO_NODES).impossible
    busy = explain_placement({"CPU": 1.0}, 2, "PACK", TOTAL, {"CPU": 1.0, "memory": TOTAL["memory"]}, TWO_NODES)
    assert not busy.impossible, "in use by other runs: it will fit once they end"
    assert not explain_placement({"CPU": 1.0}, 1, "PACK", TOTAL, TOTAL, TWO_NODES).impossible

def test_more_than_the_cluster_has_names_the_missing_resources():
    hint = placement_hint({"CPU": 64.0}, 1, "PACK", TOTAL, TOTAL, TWO_NODES)
    assert hint == "waiting for resources the cluster does not have: the run needs 64 CPU (has 4 CPU) in total"
    gpus = placement_hint({"CPU": 1.0, "GPU": 1.0}, 2, "PACK", TOTAL, TOTAL, TWO_NODES)
    assert "2 GPU (has 0 GPU)" in gpus and "CPU" not in gpus


def test_a_worker_larger_than_any_node():
    hint = placement_hint({"CPU": 3.0}, 1, "PACK", TOTAL, TOTAL, TWO_NODES)
    assert hint == "waiting for a node that can hold one worker (3 CPU): no node has that much"


def test_strict_strategies_need_one_node_or_one_node_per_worker():
    packed = placement_hint({"CPU": 1.5}, 2, "STRICT_PACK", TOTAL, TOTAL, TWO_NODES)
    assert packed.startswith("waiting for one node that can hold every worker (STRICT_PACK")
    spread = placement_hint({"CPU": 1.0}, 3, "STRICT_SPREAD", TOTAL, TOTAL, TWO_NODES)
    assert spread == "waiting for 3 nodes that can each hold one worker (STRICT_SPREAD)"
    assert placement_hint({"CPU": 1.0}, 2, "STRICT_SPREAD", TOTAL, TOTAL, TWO_NODES) == "waiting for Ray to place the workers"


def test_a_busy_cluster_and_memory_in_gib():
    busy = placement_hint({"CPU": 1.0}, 2, "PACK", TOTAL, {"CPU": 1.0, "memory": TOTAL["memory"]}, TWO_NODES)
    assert busy == "waiting for resources in use by other runs: the run needs 2 CPU (has 1 CPU) available"
    memory = placement_hint({"CPU": 1.0, "memory": 32 * 2**30}, 1, "PACK", TOTAL, TOTAL, TWO_NODES)
    assert "32.00 GiB memory (has 16.00 GiB memory)" in memory


def test_fractions_within_ray_rounding_fit():
    assert placement_hint({"CPU": 0.1}, 3, "PACK", {"CPU": 0.3}, {"CPU": 0.3}, [{"CPU": 0.3}]) == (
        "waiting for Ray to place the workers"
    )
