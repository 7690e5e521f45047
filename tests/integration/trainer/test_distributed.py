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
    assert run.failure.node_id == run.workers[1].node_id
    assert run.state_reason.startswith(f"rank 1 died on node {run.workers[1].node_id}:"), run.state_reason


def test_a_killed_actor_fails_the_run_with_its_rank(client, trainer):
    run = client.start("wait_for_stop", num_workers=2)
    client.wait_for(run.name, lambda r: r.state == run_pb2.RUN_STATE_RUNNING)
    group = trainer.active_group(run.name)
    ray.kill(group.actors[0], no_restart=True)
    done = client.wait_done(run.name, timeout=60)
    assert done.state == run_pb2.RUN_STATE_FAILED
    assert done.failure.kind == common_pb2.FAILURE_KIND_WORKER_LOST and done.failure.rank == 0, done.failure
    assert done.state_reason.startswith(f"rank 0 died on node {done.workers[0].node_id}:"), done.state_reason


def test_paddle_is_imported_before_user_code_only_where_the_run_needs_it(client):
    """A 1-rank CPU run needs nothing of Paddle before its code runs (hundreds of small
    concurrent runs could not each pay 250 MB and seconds of CPU for it); ranks of a collective
    join it through Paddle first. Either way user code computes with Paddle on the CPU."""
    single = client.wait_done(client.start("imports_paddle").name)
    assert single.state == run_pb2.RUN_STATE_SUCCEEDED, single.state_reason
    assert single.latest_metrics.metrics["paddle_before_call"] == 0.0
    pair = client.wait_done(client.start("imports_paddle", num_workers=2).name)
    assert pair.state == run_pb2.RUN_STATE_SUCCEEDED, pair.state_reason
    for run in (single, pair):
        metrics = run.latest_metrics.metrics
        assert metrics["sum"] == 3.0 and metrics["on_cpu"] == 1.0 and metrics["gpus_visible"] == 0.0
    assert pair.latest_metrics.metrics["paddle_before_call"] == 1.0
