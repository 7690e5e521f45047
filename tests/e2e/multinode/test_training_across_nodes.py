"""Training across nodes (issue 23, point 2) on a head and two worker nodes of 2 CPUs each.

- SPREAD and STRICT_SPREAD put the 2 ranks of a job on different nodes (the node ids the
  trainer records), they train over gloo across them, and end with the loss of PACK.
- A worker node killed mid-epoch: the run fails as WORKER_LOST naming the node, the job
  retries from its last checkpoint on the node left, with no epoch lost or repeated; the
  capacity view drops the node as soon as Ray declares it dead (a job pinned to it is parked,
  never dispatched) and takes it back when the node rejoins (the pinned job then runs).
- Per-node fit: a rank needing 2 CPUs is not dispatched while each node has 1 free.
"""

from __future__ import annotations

import pytest

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import job_pb2
from paddleray.services.localstack.ray_cluster import node_resource
from paddleray.trainer.v1 import trainer_service_pb2 as ts

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(600)]
J = job_pb2.JobState
S = common_pb2.PlacementStrategy
TERMINAL = {J.JOB_STATE_SUCCEEDED, J.JOB_STATE_FAILED, J.JOB_STATE_CANCELLED, J.JOB_STATE_TIMED_OUT}


def _run_nodes(cluster, job: job_pb2.Job, attempt: int = -1) -> list[str]:
    run = cluster.trainer.GetRun(ts.GetRunRequest(name=job.attempts[attempt].run), timeout=30).run
    return [w.node_id for w in sorted(run.workers, key=lambda w: w.rank)]


def test_spread_ranks_train_on_different_nodes_to_the_loss_of_pack(cluster):
    strategies = {"pack": S.PLACEMENT_STRATEGY_PACK, "spread": S.PLACEMENT_STRATEGY_SPREAD,
                  "strict-spread": S.PLACEMENT_STRATEGY_STRICT_SPREAD}
    created = {name: cluster.create(cluster.job("dp_digits", {"epochs": 3}, workers=2, strategy=strategy))
               for name, strategy in strategies.items()}
    done = {name: cluster.wait(job.name, lambda j: j.state in TERMINAL) for name, job in created.items()}
    for name, job in done.items():
        assert job.state == J.JOB_STATE_SUCCEEDED, (name, job.state_reason)
    workers = set(cluster.node_ids().values()) - {cluster.node_ids()["head"]}
    for name in ("spread", "strict-spread"):
        ranks = _run_nodes(cluster, done[name])
        assert len(set(ranks)) == 2 and set(ranks) <= workers, (name, ranks)
    packed = _run_nodes(cluster, done["pack"])
    assert len(set(packed)) == 1 and set(packed) <= workers
    losses = {name: job.latest_metrics.metrics["loss"] for name, job in done.items()}
    assert losses["spread"] == pytest.approx(losses["pack"], abs=1e-6), losses
    assert losses["strict-spread"] == pytest.approx(losses["pack"], abs=1e-6), losses


def test_a_node_lost_mid_epoch_fails_the_run_and_the_retry_resumes_on_the_node_left(cluster):
    job = cluster.create(cluster.job("dp_digits", {"epochs": 6, "epoch_s": 1.5}, workers=2,
                                     strategy=S.PLACEMENT_STRATEGY_SPREAD, max_retries=2))
    cluster.wait(job.name, lambda j: j.latest_metrics.metrics.get("epoch", 0) >= 2, message="epoch 2")
    first = cluster.get(job.name)
    rank0_node, rank1_node = _run_nodes(cluster, first)
    names = {node_id: name for name, node_id in cluster.node_ids().items()}
    lost = names[rank1_node]
    cluster.kill(lost)  # mid-epoch: each epoch sleeps 1.5 s halfway through

    retrying = cluster.wait(job.name, lambda j: len(j.attempts) == 2, message="the retry")
    failed = retrying.attempts[0]
    assert failed.failure.kind == common_pb2.FAILURE_KIND_WORKER_LOST, failed.failure
    assert failed.failure.node_id == rank1_node and rank1_node in failed.failure_reason
    # The capacity view has dropped the node by the time its run's failure is known.
    assert lost not in cluster.node_ids()
    assert cluster.cluster().total.num_cpus == 2
    pinned = cluster.create(cluster.job("hold", {}, cpus=0.25, custom={node_resource(lost): 0.01}))
    parked = cluster.wait(pinned.name, lambda j: "paddleray-node" in j.state_reason, message="the pinned job's reason")
    assert parked.state == J.JOB_STATE_QUEUED and not parked.attempts, parked

    done = cluster.wait(job.name, lambda j: j.state in TERMINAL)
    assert done.state == J.JOB_STATE_SUCCEEDED, done.state_reason
    assert set(_run_nodes(cluster, done)) == {rank0_node}, "the retry runs on the capacity left"
    resumed_at = int(done.attempts[1].resumed_from.epoch)
    epochs = {1: [], 2: []}
    for event in cluster.events(job.name):
        if event.WhichOneof("payload") == "metrics":
            epochs[event.attempt].append(int(event.metrics.metrics["epoch"]))
    assert epochs[1][-1] == resumed_at and epochs[2][0] == resumed_at + 1, epochs
    assert epochs[1] + epochs[2] == list(range(1, 7)), "no epoch lost or repeated"

    cluster.rejoin(lost)  # the capacity comes back, and the job that waited for it runs
    assert cluster.cluster().total.num_cpus == 4
    running = cluster.wait(pinned.name, lambda j: j.state == J.JOB_STATE_RUNNING, message="the pinned job to run")
    assert _run_nodes(cluster, running) == [cluster.node_ids()[lost]]
    cluster.cancel(pinned)


def test_a_rank_needing_2_cpus_waits_while_each_node_has_1_free(cluster):
    holders = [cluster.create(cluster.job("hold", {}, cpus=1, custom={node_resource(name): 0.01}))
               for name in ("node-1", "node-2")]
    for holder in holders:
        cluster.wait(holder.name, lambda j: j.state == J.JOB_STATE_RUNNING)
    wide = cluster.create(cluster.job("hold", {}, cpus=2))
    waiting = cluster.wait(wide.name, lambda j: j.state_reason == "no node has 2 CPUs free; largest free: 1",
                           message="the wide job's reason")
    assert waiting.state == J.JOB_STATE_QUEUED and not waiting.attempts
    cluster.cancel(holders[1])
    running = cluster.wait(wide.name, lambda j: j.state == J.JOB_STATE_RUNNING)
    assert _run_nodes(cluster, running) == [cluster.node_ids()["node-2"]]
    cluster.cancel(holders[0], wide)


def test_quarter_cpu_trials_fill_a_node(cluster):
    """Fractional packing: 8 single-rank trials of 0.25 CPU fill a 2-CPU node exactly (their
    workers import nothing of Paddle before their code, so eight start in seconds); a ninth
    waits, saying why. Trials per node and throughput per fraction: `python -m bench concurrency`."""
    label = {node_resource("node-1"): 0.01}
    trials = [cluster.create(cluster.job("hold", {}, cpus=0.25, custom=label)) for _ in range(8)]
    running = [cluster.wait(t.name, lambda j: j.state == J.JOB_STATE_RUNNING) for t in trials]
    node_1 = cluster.node_ids()["node-1"]
    assert all(_run_nodes(cluster, job) == [node_1] for job in running)
    ninth = cluster.create(cluster.job("hold", {}, cpus=0.25, custom=label))
    waiting = cluster.wait(ninth.name, lambda j: j.state_reason.startswith("no node has"), message="the ninth's reason")
    assert waiting.state == J.JOB_STATE_QUEUED
    assert waiting.state_reason == "no node has 0.25 CPUs and 0.01 of paddleray-node:node-1 free at once"
    cluster.cancel(*trials, ninth)
