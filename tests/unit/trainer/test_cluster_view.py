"""The trainer's view of Ray resources: what GetClusterResources reports per node."""

from __future__ import annotations

import pytest

from paddleray.services.trainer.trainer import Resources

pytestmark = pytest.mark.unit
PG = "e8bbe7b83d003c62376e968751af01000000"


def test_placement_group_resources_are_left_out_and_node_labels_kept():
    """Ray adds resources per placement group: kept, the view would grow with every run."""
    view = Resources.from_ray({
        "CPU": 1.0, "memory": 1e9, "object_store_memory": 1e8, "node:192.0.2.2": 1.0, f"CPU_group_{PG}": 0.5,
        f"CPU_group_0_{PG}": 0.5, f"bundle_group_0_{PG}": 999.0, f"paddleray-node:node-1_group_{PG}": 0.01,
        "paddleray-node:node-1": 1.0, "accelerator_type:T4": 1.0,
    })
    assert view == Resources(1.0, 0.0, 10**9, {"paddleray-node:node-1": 1.0, "accelerator_type:T4": 1.0})
