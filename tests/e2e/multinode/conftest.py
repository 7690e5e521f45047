"""A multi-node Ray cluster on this host, with the services pointed at its head, for this package.

`paddleray up --nodes 2` as a person would start it (stack.up(nodes=2)): a head without CPUs
and two worker nodes of 2 CPUs each, every node a raylet of its own with the label resource
`paddleray-node:<name>`; the scheduler, trainer and exporter are processes with their own Redis.
Node loss is a SIGKILL of a node's process group and processes (ray_cluster.kill_node_processes)
and a rejoin is `ray start` again under the same name. The head's node health check is
shortened (ray_cluster.FAST_NODE_DEATH_ENV: a dead node is declared dead after ~1.5 s instead
of Ray's 16.6 s), which is what keeps these tests' minutes small; nothing else is changed.

Package-scoped: the cluster and Serve poll for as long as they live. Each test starts with every
node up (`cluster` rejoins any node an earlier test killed).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from paddleray.scheduler.v1 import job_pb2, job_service_pb2_grpc
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.services.localstack import stack
from paddleray.services.localstack.ports import pid_alive, wait_until
from paddleray.services.localstack.ray_cluster import (
    FAST_NODE_DEATH_ENV,
    RayWorkerNode,
    kill_node_processes,
    node_name,
)
from paddleray.trainer.v1 import trainer_service_pb2 as ts
from paddleray.trainer.v1 import trainer_service_pb2_grpc

WORKERS = Path(__file__).parent / "workers"
MODULE = "multinode_entrypoints"
NODES = 2
NODE_CPUS = 2


@dataclass
class MultiNode:
    state: stack.StackState

    @property
    def jobs(self) -> job_service_pb2_grpc.JobServiceStub:
        return job_service_pb2_grpc.JobServiceStub(grpc.insecure_channel(self.state.address("scheduler")))

    @property
    def trainer(self) -> trainer_service_pb2_grpc.TrainerServiceStub:
        return trainer_service_pb2_grpc.TrainerServiceStub(grpc.insecure_channel(self.state.address("trainer")))

    def cluster(self) -> ts.GetClusterResourcesResponse:
        return self.trainer.GetClusterResources(ts.GetClusterResourcesRequest(), timeout=30)

    def node_ids(self) -> dict[str, str]:
        """Node name -> Ray node id, of the nodes alive now (as the trainer reports them)."""
        return {node_name(dict(n.total.custom)): n.node_id for n in self.cluster().nodes}

    def kill(self, name: str) -> None:
        kill_node_processes(self._node(name).pid)

    def rejoin(self, name: str) -> str:
        """Starts the node again under its name; returns its new Ray node id once the trainer sees it."""
        entry = self._node(name)
        node = RayWorkerNode(self.state.ray_address, name, num_cpus=entry.num_cpus, env=dict(FAST_NODE_DEATH_ENV),
                             log_file=Path(entry.log_file)).start()
        entry.pid = node.pid
        self.state.save()  # `down` stops the new process
        return wait_until(lambda: self.node_ids().get(name), timeout=60, interval=0.2,
                          message=f"the trainer to see {name} again")

    def ensure_all_up(self) -> None:
        for entry in self.state.ray_nodes:
            if not pid_alive(entry.pid):
                self.rejoin(entry.name)
        wait_until(lambda: len(self.node_ids()) == NODES + 1, timeout=60, interval=0.2,
                   message="every node to be alive")

    def job(self, function: str, config: dict, **spec) -> job_pb2.Job:
        job = job_pb2.Job()
        job.spec.entrypoint = f"{MODULE}:{function}"
        job.spec.config.update(config)
        job.spec.runtime_env.env_vars["PYTHONPATH"] = str(WORKERS)
        job.spec.num_workers = spec.pop("workers", 1)
        job.spec.resources_per_worker.num_cpus = spec.pop("cpus", 0.5)
        for key, value in spec.pop("custom", {}).items():
            job.spec.resources_per_worker.custom[key] = value
        job.spec.placement_strategy = spec.pop("strategy", 0)
        job.retry_policy.max_retries = spec.pop("max_retries", 0)
        job.retry_policy.initial_backoff.FromMilliseconds(spec.pop("backoff_ms", 100))
        assert not spec, spec
        return job

    def create(self, job: job_pb2.Job) -> job_pb2.Job:
        return self.jobs.CreateJob(js.CreateJobRequest(job=job), timeout=30).job

    def get(self, name: str) -> job_pb2.Job:
        return self.jobs.GetJob(js.GetJobRequest(name=name), timeout=30).job

    def wait(self, name: str, accept, timeout: float = 180, message: str = "") -> job_pb2.Job:
        def reached() -> job_pb2.Job | None:
            job = self.get(name)
            return job if accept(job) else None

        return wait_until(reached, timeout=timeout, interval=0.2,
                          message=message or f"{name} to reach the state the test waits for")

    def cancel(self, *jobs: job_pb2.Job) -> None:
        """Cancels the jobs at once (each call waits for its run to stop)."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max(1, len(jobs))) as pool:
            list(pool.map(lambda j: self.jobs.CancelJob(js.CancelJobRequest(name=j.name), timeout=60), jobs))

    def events(self, name: str, timeout: float = 300) -> list[job_pb2.JobEvent]:
        return [r.event for r in self.jobs.WatchJob(js.WatchJobRequest(name=name), timeout=timeout)]

    def _node(self, name: str) -> stack.NodeProcess:
        return next(n for n in self.state.ray_nodes if n.name == name)


@pytest.fixture(scope="package")
def multinode_stack(tmp_path_factory):
    state_dir = tmp_path_factory.mktemp("multinode") / "stack"
    previous = os.environ.get("PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST")
    os.environ["PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST"] = json.dumps(["paddleray.services.trainer.examples", MODULE])
    try:
        state = stack.up(state_dir, nodes=NODES, num_cpus=NODE_CPUS, ray_env=FAST_NODE_DEATH_ENV)
    finally:
        if previous is None:
            os.environ.pop("PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST")
        else:
            os.environ["PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST"] = previous
    try:
        yield MultiNode(state)
    finally:
        stack.down(state_dir)


@pytest.fixture
def cluster(multinode_stack: MultiNode) -> MultiNode:
    multinode_stack.ensure_all_up()
    return multinode_stack
