"""Serving across nodes (issue 23, point 3) on the package's head and two worker nodes of 2 CPUs.

A model trained and exported through the services is deployed with 2 replicas of 1.5 CPUs,
so each worker node holds one. 16 clients call ModelInfer in a closed loop on the path
production uses: Ray Serve's HAProxy on the head (the deployment's `endpoint`), with the
`application` metadata it routes by. A worker node is then killed (its raylet's process group
and every process below it):
- the only failed requests are those in flight when the node went, and those HAProxy sent to
  the dead replica in the moment before it marked it down (refused, REFUSED_STREAM: never
  processed), at most one of each per client; every later request goes to the replica left;
- serving goes on: every client is answered after the kill;
- GetDeployment shows where the replicas run (version_statuses[].replicas_per_node): one on
  each node before, only the node left after, and both again once the node rejoins and Serve
  has started the replica it could not place meanwhile.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import grpc
import numpy as np
import pytest

from paddleray.common.v1 import common_pb2
from paddleray.exporter.v1 import deployment_pb2, model_pb2
from paddleray.inference.v2 import grpc_service_pb2 as pb
from paddleray.scheduler.v1 import job_pb2
from paddleray.services.client import Client, ServiceError
from paddleray.services.localstack.ports import wait_until
from support.serving import application_channel, v2_stub

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(900)]
MODEL = "mn-digits"
CLIENTS = 16
REPLICA_CPUS = 1.5  # one replica per 2-CPU node


@dataclass
class Call:
    client: int
    start: float
    end: float
    code: grpc.StatusCode
    details: str = ""


@dataclass
class InferLoop:
    """CLIENTS threads, each with its own channel, calling ModelInfer back to back."""

    endpoint: str
    calls: list[Call] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _client(self, index: int) -> None:
        request = pb.ModelInferRequest(model_name=MODEL)
        request.inputs.add(name="x", datatype="FP32", shape=[1, 64])
        request.raw_input_contents.append(np.random.default_rng(index).random((1, 64), np.float32).tobytes())
        with application_channel(self.endpoint, MODEL) as channel:
            stub = v2_stub(channel)
            while not self.stop.is_set():
                start = time.monotonic()
                try:
                    stub.ModelInfer(request, timeout=30)
                    code, details = grpc.StatusCode.OK, ""
                except grpc.RpcError as exc:
                    code, details = exc.code(), exc.details() or ""
                with self.lock:
                    self.calls.append(Call(index, start, time.monotonic(), code, details))

    def __enter__(self) -> InferLoop:
        self.threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(CLIENTS)]
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)

    def answered(self) -> int:
        with self.lock:
            return sum(1 for c in self.calls if c.code == grpc.StatusCode.OK)


def _per_node(deployment: deployment_pb2.Deployment) -> dict[str, int]:
    (status,) = deployment.version_statuses
    return {n.node_id: n.running_replicas for n in status.replicas_per_node}


@pytest.fixture
def client(cluster):
    with Client.connect(address=cluster.state.address("scheduler"), exporter_address=cluster.state.address("exporter"),
                        state_dir=cluster.state.state_dir) as opened:
        yield opened
        try:
            opened.exporter.delete_deployment(MODEL)
            opened.exporter.wait_deleted(MODEL, timeout=180)
        except ServiceError:
            pass  # never created


def _served_version(cluster, client: Client) -> str:
    """The digits MLP trained by the scheduler and exported by the exporter, as a user would."""
    job = cluster.job("unused", {"epochs": 1, "hidden_sizes": [8]}, cpus=0.5)
    job.spec.entrypoint = "paddleray.services.trainer.examples.digits_mlp:train"
    job.spec.ClearField("runtime_env")
    trained = cluster.wait(cluster.create(job).name, lambda j: j.state in {
        job_pb2.JOB_STATE_SUCCEEDED, job_pb2.JOB_STATE_FAILED, job_pb2.JOB_STATE_CANCELLED})
    assert trained.state == job_pb2.JOB_STATE_SUCCEEDED, trained.state_reason
    version = client.exporter.export_model(MODEL, job=trained.name)
    done = client.exporter.wait_model_version(version.name, timeout=300)
    assert done.state == model_pb2.MODEL_VERSION_STATE_READY, done.state_reason
    return done.name


def test_replicas_on_two_nodes_serve_through_a_node_loss_and_come_back(cluster, client):
    version = _served_version(cluster, client)
    spec = deployment_pb2.Deployment(traffic=[deployment_pb2.TrafficTarget(model_version=version, percent=100)],
                                     num_replicas=2,
                                     resources_per_replica=common_pb2.Resources(num_cpus=REPLICA_CPUS))
    client.exporter.create_deployment(MODEL, spec)
    healthy = client.exporter.wait_deployment(MODEL, timeout=300, until_healthy=True)
    nodes = cluster.node_ids()
    workers = {nodes["node-1"], nodes["node-2"]}
    assert _per_node(healthy) == dict.fromkeys(workers, 1), healthy.version_statuses

    with InferLoop(healthy.endpoint) as loop:
        wait_until(lambda: loop.answered() >= 200, timeout=120, interval=0.2, message="200 answers before the kill")
        kill_started = time.monotonic()
        cluster.kill("node-1")
        killed_at = time.monotonic()  # every process of the node is gone: later calls must not fail
        wait_until(lambda: nodes["node-1"] not in cluster.node_ids(), timeout=60, interval=0.2,
                   message="Ray to declare node-1 dead")
        after_death = len(loop.calls)
        wait_until(lambda: sum(1 for c in loop.calls[after_death:] if c.code == grpc.StatusCode.OK) >= 200,
                   timeout=120, interval=0.2, message="200 answers after node-1's death")
        shrunk = wait_until(lambda: (d := client.exporter.get_deployment(MODEL)) and
                            _per_node(d) == {nodes["node-2"]: 1} and d, timeout=60, interval=0.5,
                            message="GetDeployment to show one replica, on node-2")
        settled_at = time.monotonic()
    (status,) = shrunk.version_statuses
    assert (status.running_replicas, status.target_replicas) == (1, 2)

    failed = [c for c in loop.calls if c.code != grpc.StatusCode.OK]
    assert all(c.end > kill_started for c in failed), "a call failed before the node was killed"
    # Calls HAProxy sent to the dead replica in the moment before it marked it down are refused
    # (REFUSED_STREAM: never processed, safe to send again); later ones all go to the replica left.
    late = [c for c in failed if c.start >= killed_at]
    assert all(c.code == grpc.StatusCode.UNAVAILABLE and "error code 7" in c.details and c.start - killed_at < 2
               for c in late), [(c.code.name, c.details, round(c.start - killed_at, 2)) for c in late]
    per_client = [sum(1 for c in failed if c.client == i) for i in range(CLIENTS)]
    assert max(per_client) <= 2, f"a client failed more than in flight + once refused: {per_client}"
    later = {c.client for c in loop.calls if c.start > killed_at and c.code == grpc.StatusCode.OK}
    assert later == set(range(CLIENTS)), "every client is answered after the kill"
    answered = sum(1 for c in loop.calls if c.code == grpc.StatusCode.OK)
    print(f"\nnode loss under {CLIENTS} clients: {answered} answered, {len(failed)} failed, {len(late)} of them "
          f"sent up to {max((c.start - killed_at for c in late), default=0):.2f} s after the kill "
          f"({sorted(c.code.name for c in failed)}), {settled_at - killed_at:.1f} s until GetDeployment showed 1/2")

    node_1 = cluster.rejoin("node-1")
    back = wait_until(lambda: (d := client.exporter.get_deployment(MODEL)) and
                      _per_node(d) == {node_1: 1, nodes["node-2"]: 1} and d, timeout=180, interval=0.5,
                      message="the second replica back, on the rejoined node")
    assert back.version_statuses[0].running_replicas == 2
