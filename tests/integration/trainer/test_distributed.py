"""Data parallelism across Ray actors with real Paddle (gloo): gradients and dead ranks."""

from __future__ import annotations

import json

import numpy as np
import pytest
import ray

from paddleray.common.v1 import common_pb2
from paddleray.trainer.v1 import run_pb2

pytestmark = pytest.mark.integration


def test_two_ranks_average_their_gradients(client, tmp_path):
    run = client.wait_done(client.start("dp_gradients", {"out_dir": str(tmp_path)}, num_workers=2).name)
    assert run.state == run_pb2.RUN_STATE_SUCCEEDED, run.state_reason
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1)]
    local = np.array([r["local"] for r in ranks])
    assert not np.allclose(local[0], local[1]), "the ranks saw different data"
    for r in ranks:
        np.testing.assert_allclose(r["dp"], local.mean(axis=0), rtol=1e-5)
    assert sorted(w.rank for w in run.workers) == [0, 1]
    assert [w.local_rank for w in run.workers] == [0, 1]  # one node


def test_a_rank_that_exits_fails_the_run_while_its_peer_waits_in_a_collective(client):
    run = client.wait_done(client.start("rank_dies", num_workers=2).name, timeout=90)
    assert run.state == run_pb2.RUN_STATE_FAILED
    assert run.failure.kind == common_pb2.FAILURE_KIND_WORKER_LOST and run.failure.rank == 1, run.failure
    assert run.state_reason.startswith("rank 1 died:"), run.state_reason


def test_a_killed_actor_fails_the_run_with_its_rank(client, trainer):
    run = client.start("wait_for_stop", num_workers=2)
    client.wait_for(run.name, lambda r: r.state == run_pb2.RUN_STATE_RUNNING)
    group = trainer.active_group(run.name)
    ray.kill(group.actors[0], no_restart=True)
    done = client.wait_done(run.name, timeout=60)
    assert done.state == run_pb2.RUN_STATE_FAILED
    assert done.failure.kind == common_pb2.FAILURE_KIND_WORKER_LOST and done.failure.rank == 0, done.failure
    assert done.state_reason.startswith("rank 0 died:"), done.state_reason
