"""Storage that clusters have (issue 23, point 4): the stack's storage root on a real S3 API
server (moto's server mode, tests/support/s3.py), a head and two worker nodes of 2 CPUs each.

- The ranks of a SPREAD job, on different nodes, write per-rank logs to the object store;
  rank 0 writes its checkpoints there (files first, manifest last). The node of rank 0 is
  killed mid-epoch: the retry runs on the other node, which never held a checkpoint, and
  resumes from the one on the object store with no epoch lost or repeated.
- A model trained with the object-store root is exported there (files, then manifest.json
  last) and served: the Serve replica, on a worker node, downloads the version to its node's
  cache, checked against the manifest, and ModelInfer answers. While the version's manifest is
  missing (an export cut short), the deployment is not served and says why.
- The ranks of a SPREAD job, on two nodes, read an s3:// Parquet dataset through
  ctx.get_dataset_shard, half of its rows each.
- A local dataset path is refused on an object-store root, naming the field and the root.
- Last: the secret access key is in none of Ray's session logs, the stack's files (service
  logs, trainer records) or any Redis key (jobs, runs' events, models, deployments).

Its own stack (the package's `cluster` has a directory root), started and stopped in this
module before any test of the package asks for that one.
"""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import grpc
import numpy as np
import pyarrow
import pyarrow.parquet
import pytest
import redis

from paddleray.common.v1 import common_pb2
from paddleray.exporter.v1 import deployment_pb2, model_pb2
from paddleray.inference.v2 import grpc_service_pb2 as pb
from paddleray.scheduler.v1 import job_pb2
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.services.client import Client
from paddleray.services.localstack import stack
from paddleray.services.localstack.ports import wait_until
from paddleray.services.localstack.ray_cluster import FAST_NODE_DEATH_ENV, descendants
from paddleray.trainer.v1 import trainer_service_pb2 as ts
from support.serving import application_channel, v2_stub

from .conftest import MODULE, NODE_CPUS, NODES, MultiNode

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(900)]
J = job_pb2.JobState
S = common_pb2.PlacementStrategy
TERMINAL = {J.JOB_STATE_SUCCEEDED, J.JOB_STATE_FAILED, J.JOB_STATE_CANCELLED, J.JOB_STATE_TIMED_OUT}
ROWS = 200
MODEL = "s3-digits"


@pytest.fixture(scope="module")
def s3_cluster(s3_server, tmp_path_factory):
    bucket = s3_server.new_bucket()
    root = f"s3://{bucket}/paddleray"
    state_dir = tmp_path_factory.mktemp("multinode-s3") / "stack"
    # The services and every raylet (so every Ray worker) inherit the credentials, as pods get
    # them from a Secret; nothing else carries them.
    allowlist = [MODULE, "object_storage_entrypoints", "paddleray.services.trainer.examples"]
    given = {**s3_server.env, "PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST": json.dumps(allowlist)}
    previous = {key: os.environ.get(key) for key in given}
    os.environ.update(given)  # for the module: a node that rejoins (`ray start` again) gets them too
    started = time.time()
    try:
        state = stack.up(state_dir, nodes=NODES, num_cpus=NODE_CPUS, ray_env=FAST_NODE_DEATH_ENV, storage_root=root)
        try:
            yield MultiNode(state), bucket, started
        finally:
            stack.down(state_dir)
    finally:
        for key, value in previous.items():
            os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)


@pytest.fixture
def s3_nodes(s3_cluster):
    """The module's stack with every node up: a test before may have killed one, and a ranks'
    STRICT_SPREAD (or a SPREAD the test expects on two nodes) then waits for a node that is gone
    (the cause of a STRICT_SPREAD dataset job waiting > 300 s here once). A node that rejoins
    gets the credentials from the environment, as the others did."""
    s3_cluster[0].ensure_all_up()
    return s3_cluster


def _job(cluster: MultiNode, entrypoint: str, config: dict, **spec) -> job_pb2.Job:
    job = cluster.job("dp_digits", config, **spec)
    job.spec.entrypoint = entrypoint
    return job


def _run(cluster: MultiNode, job: job_pb2.Job, attempt: int):
    return cluster.trainer.GetRun(ts.GetRunRequest(name=job.attempts[attempt].run), timeout=30).run


def _logs(cluster: MultiNode, job: job_pb2.Job, attempt: int = 0) -> list[str]:
    responses = cluster.jobs.GetJobLogs(js.GetJobLogsRequest(name=job.name, attempt=attempt), timeout=60)
    return [f"{line.rank}:{line.text}" for response in responses for line in response.lines]


def test_a_model_is_exported_to_the_object_store_and_served_from_it(s3_nodes, s3_server):
    cluster, bucket, _ = s3_nodes
    job = cluster.job("unused", {"epochs": 1, "hidden_sizes": [8]}, cpus=0.5)
    job.spec.entrypoint = "paddleray.services.trainer.examples.digits_mlp:train"
    job.spec.ClearField("runtime_env")
    trained = cluster.wait(cluster.create(job).name, lambda j: j.state in TERMINAL, timeout=300)
    assert trained.state == J.JOB_STATE_SUCCEEDED, trained.state_reason
    assert trained.latest_checkpoint.uri.startswith(f"s3://{bucket}/paddleray/runs/"), trained.latest_checkpoint.uri
    with Client.connect(address=cluster.state.address("scheduler"), exporter_address=cluster.state.address("exporter"),
                        state_dir=cluster.state.state_dir) as client:
        version = client.exporter.export_model(MODEL, job=trained.name)
        done = client.exporter.wait_model_version(version.name, timeout=300)
        assert done.state == model_pb2.MODEL_VERSION_STATE_READY, done.state_reason
        prefix = f"paddleray/models/{MODEL}/versions/{done.name.rsplit('/', 1)[1]}/"
        assert all(a.uri.startswith(f"s3://{bucket}/{prefix}") for a in done.artifacts), done.artifacts
        keys = set(s3_server.keys(bucket, prefix))
        assert {prefix + "manifest.json", prefix + "paddle/inference.pdiparams"} <= keys, keys

        # Cut short: the files are there, the manifest (written last) is not. Nothing serves it.
        s3 = s3_server.client()
        manifest = s3.get_object(Bucket=bucket, Key=prefix + "manifest.json")["Body"].read()
        s3.delete_object(Bucket=bucket, Key=prefix + "manifest.json")
        spec = deployment_pb2.Deployment(traffic=[deployment_pb2.TrafficTarget(model_version=done.name, percent=100)],
                                         num_replicas=1, resources_per_replica=common_pb2.Resources(num_cpus=0.5))
        client.exporter.create_deployment(MODEL, spec)
        try:
            seen: list[deployment_pb2.Deployment] = []
            try:
                refused = wait_until(lambda: (seen.append(d := client.exporter.get_deployment(MODEL)) or
                                              "missing from storage" in d.state_reason) and d, timeout=120, interval=0.5,
                                     message="the deployment to say that its version's artifact is missing")
            except TimeoutError:
                raise AssertionError(f"the deployment never said its artifact is missing; last: {seen[-1:]}") from None
            assert refused.state != deployment_pb2.DEPLOYMENT_STATE_HEALTHY, refused

            s3.put_object(Bucket=bucket, Key=prefix + "manifest.json", Body=manifest)  # the export completes
            healthy = client.exporter.wait_deployment(MODEL, timeout=300, until_healthy=True)
            request = pb.ModelInferRequest(model_name=MODEL)
            request.inputs.add(name="x", datatype="FP32", shape=[2, 64])
            request.raw_input_contents.append(np.random.default_rng(0).random((2, 64), np.float32).tobytes())
            with application_channel(healthy.endpoint, MODEL) as channel:
                answer = v2_stub(channel).ModelInfer(request, timeout=60)
            assert list(answer.outputs[0].shape) == [2, 10]
            (status,) = healthy.version_statuses
            nodes = cluster.node_ids()
            assert {n.node_id for n in status.replicas_per_node} <= {nodes["node-1"], nodes["node-2"]}, status
        finally:
            client.exporter.delete_deployment(MODEL)
            client.exporter.wait_deleted(MODEL, timeout=180)

        # Deleted, its objects go with it: nothing of the version, then of the model, stays.
        client.exporter.delete_model_version(done.name)
        assert not [k for k in s3_server.keys(bucket, prefix) if not k.endswith("/")], "the version's objects are deleted"
        client.exporter.delete_model(MODEL)
        left = [k for k in s3_server.keys(bucket, f"paddleray/models/{MODEL}/") if not k.endswith("/")]
        assert not left, f"the model's objects are deleted: {left}"


def test_ranks_on_two_nodes_read_an_s3_dataset_through_get_dataset_shard(s3_nodes, s3_server):
    cluster, bucket, _ = s3_nodes
    data = io.BytesIO()
    pyarrow.parquet.write_table(pyarrow.table({"id": list(range(ROWS))}), data)
    s3_server.client().put_object(Bucket=bucket, Key="data/ids.parquet", Body=data.getvalue())
    job = _job(cluster, "object_storage_entrypoints:count_rows", {}, workers=2, strategy=S.PLACEMENT_STRATEGY_SPREAD)
    job.spec.datasets.add(name="train", uri=f"s3://{bucket}/data/ids.parquet")
    done = cluster.wait(cluster.create(job).name, lambda j: j.state in TERMINAL, timeout=300)
    assert done.state == J.JOB_STATE_SUCCEEDED, done.state_reason
    assert len({w.node_id for w in _run(cluster, done, 0).workers}) == 2, "the ranks ran on two nodes"
    read = sorted(line for line in _logs(cluster, done) if " read " in line)
    assert read == [f"0:rank 0 read {ROWS // 2} rows", f"1:rank 1 read {ROWS // 2} rows"], read


def test_ranks_on_two_nodes_write_to_the_object_store_and_a_retry_elsewhere_resumes_from_it(s3_nodes, s3_server):
    cluster, bucket, _ = s3_nodes
    job = cluster.create(_job(cluster, f"{MODULE}:dp_digits", {"epochs": 6, "epoch_s": 1.5}, workers=2,
                              strategy=S.PLACEMENT_STRATEGY_SPREAD, max_retries=2))
    cluster.wait(job.name, lambda j: j.latest_metrics.metrics.get("epoch", 0) >= 2, message="epoch 2")
    first = cluster.get(job.name)
    ranks = [w.node_id for w in sorted(_run(cluster, first, 0).workers, key=lambda w: w.rank)]
    assert len(set(ranks)) == 2, ranks
    names = {node_id: name for name, node_id in cluster.node_ids().items()}
    cluster.kill(names[ranks[0]])  # the node that wrote the checkpoints, mid-epoch

    done = cluster.wait(job.name, lambda j: j.state in TERMINAL, timeout=300)
    assert done.state == J.JOB_STATE_SUCCEEDED, done.state_reason
    assert len(done.attempts) == 2
    assert done.attempts[0].failure.kind == common_pb2.FAILURE_KIND_WORKER_LOST
    resumed = done.attempts[1].resumed_from
    assert resumed.uri.startswith(f"s3://{bucket}/paddleray/runs/"), resumed.uri
    retry_nodes = {w.node_id for w in _run(cluster, done, 1).workers}
    assert retry_nodes == {ranks[1]}, "the retry ran on the node that never held a checkpoint"
    epochs = {1: [], 2: []}
    for event in cluster.events(job.name):
        if event.WhichOneof("payload") == "metrics":
            epochs[event.attempt].append(int(event.metrics.metrics["epoch"]))
    assert epochs[1][-1] == int(resumed.epoch) and epochs[2][0] == int(resumed.epoch) + 1, epochs
    assert epochs[1] + epochs[2] == list(range(1, 7)), "no epoch lost or repeated"

    # On the object store: complete checkpoints (manifest and files) and both ranks' logs.
    run_prefix = "paddleray/runs/" + done.attempts[1].run.removeprefix("runs/")
    keys = s3_server.keys(bucket, run_prefix)
    manifests = [k for k in keys if k.endswith("/paddleray_checkpoint.json")]
    assert manifests and all(k.replace("paddleray_checkpoint.json", "state.json") in keys for k in manifests), keys
    first_run = "paddleray/runs/" + done.attempts[0].run.removeprefix("runs/")
    assert {f"{first_run}/logs/rank-1.stdout.log", f"{first_run}/logs/rank-1.stderr.log"} <= set(
        s3_server.keys(bucket, first_run)), "the surviving rank's logs were uploaded from its node"
    assert {f"{run_prefix}/logs/rank-{r}.stderr.log" for r in (0, 1)} <= set(keys)


def test_a_local_dataset_path_is_refused_on_an_object_store_root(s3_cluster):
    cluster, bucket, _ = s3_cluster
    job = _job(cluster, "object_storage_entrypoints:count_rows", {})
    job.spec.datasets.add(name="train", uri="data/ids.parquet")
    with pytest.raises(grpc.RpcError) as raised:
        cluster.create(job)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.datasets[0].uri" in raised.value.details() and f"s3://{bucket}/paddleray" in raised.value.details()


def test_the_secret_access_key_is_in_no_log_or_record(s3_cluster, s3_server):
    """Last in the module, after training, export and serving on the object store."""
    cluster, _, _ = s3_cluster
    secret = s3_server.secret.encode()
    files = [p for p in Path(cluster.state.state_dir).rglob("*") if p.is_file()]
    sessions = _ray_session_dirs(cluster.state)
    assert sessions, "the cluster's Ray session directory was found"
    files += [p for d in sessions for p in d.rglob("*") if p.is_file()]
    assert any(p.name == "runtime_env_agent.log" for p in files), "Ray's logs are among those read"
    assert not [str(p) for p in files if secret in _read(p)], "the secret is in these files"

    client = redis.Redis.from_url(cluster.state.redis_url)
    kinds = {}
    for key in client.scan_iter(count=1000):
        kind = client.type(key).decode()
        kinds[kind] = kinds.get(kind, 0) + 1
        assert secret not in key + b"".join(_redis_values(client, key, kind)), key
    assert sum(kinds.values()) > 10 and "hash" in kinds, kinds  # jobs, models, deployments were read


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # a socket, or a file Ray removed meanwhile
        return b""


def _ray_session_dirs(state: stack.StackState) -> set[Path]:
    """Ray's session directories of the stack's raylets: the --session_dir of every process
    below the head's and the nodes' `ray start`."""
    found: set[Path] = set()
    for start in [state.ray_pid, *(n.pid for n in state.ray_nodes)]:
        for pid in [start, *descendants(start)] if start else []:
            try:
                args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            found |= {Path(a.split(b"=", 1)[1].decode()) for a in args if a.startswith(b"--session_dir=")}
    return found


def _redis_values(client: redis.Redis, key: bytes, kind: str) -> list[bytes]:
    if kind == "string":
        return [client.get(key) or b""]
    if kind == "hash":
        return [part for item in client.hgetall(key).items() for part in item]
    if kind == "list":
        return client.lrange(key, 0, -1)
    if kind == "set":
        return list(client.smembers(key))
    if kind == "zset":
        return [member for member, _ in client.zrange(key, 0, -1, withscores=True)]
    if kind == "stream":
        return [part for _, entry in client.xrange(key) for item in entry.items() for part in item]
    return []
