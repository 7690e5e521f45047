"""deploy/kuberay manifests validated against KubeRay's CRD OpenAPI schemas (deploy/kuberay/crds).

Kubernetes prunes unknown fields silently, so the schemas are made strict here (no property
the CRD does not declare), which turns a misspelt field into a failure instead of a no-op.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path

import jsonschema
import pytest
import yaml

from support.deploy import DEPLOY, load_all, pin, pyproject

pytestmark = pytest.mark.unit

# The KubeRay CRDs the manifests target, kept in the repo (copied from shared/schemas/kuberay)
# so that the check runs in any checkout, and so that `kubectl apply` can install them.
SCHEMAS = DEPLOY / "kuberay" / "crds"
MANIFESTS = sorted((DEPLOY / "kuberay").glob("*.yaml"))


def _strict(schema):
    if isinstance(schema, dict):
        schema = {key: _strict(value) for key, value in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


@cache
def _crds() -> dict[str, dict]:
    """The CRDs by kind (parsed once: they are megabytes of YAML)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crds = [yaml.load(path.read_text(), Loader=loader) for path in sorted(SCHEMAS.glob("*.yaml"))]
    return {crd["spec"]["names"]["kind"]: crd for crd in crds}


@cache
def _validator(kind: str, version: str) -> jsonschema.Draft7Validator:
    crd = _crds().get(kind)
    assert crd is not None, f"no CRD for {kind} in {SCHEMAS}"
    [served] = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return jsonschema.Draft7Validator(_strict(served["schema"]["openAPIV3Schema"]))


def _errors(doc: dict) -> list[str]:
    group, version = doc["apiVersion"].split("/")
    assert group == "ray.io"
    validator = _validator(doc["kind"], version)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def _doc(name: str) -> dict:
    [doc] = load_all(DEPLOY / "kuberay" / name)
    return doc


def test_the_crd_schemas_are_there():
    assert {"RayCluster", "RayJob", "RayService"} <= set(_crds())


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_matches_its_crd_schema(path):
    for doc in load_all(path):
        assert _errors(doc) == []


@pytest.mark.parametrize(
    ("break_it", "where"),
    [
        (lambda d: d["spec"].__setitem__("workerGroupSpec", d["spec"].pop("workerGroupSpecs")), "spec"),
        (lambda d: d["spec"]["workerGroupSpecs"][0].__setitem__("maxReplicas", "four"), "maxReplicas"),
        (lambda d: d["spec"]["headGroupSpec"].pop("template"), "headGroupSpec"),
        (lambda d: d["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0].__setitem__("imagePullPolicy", 3), "imagePullPolicy"),
    ],
    ids=["misspelt-field", "wrong-type", "missing-required", "wrong-container-field-type"],
)
def test_the_validation_catches_broken_manifests(break_it, where):
    doc = copy.deepcopy(_doc("raycluster.yaml"))
    break_it(doc)
    errors = _errors(doc)
    assert errors and any(where in e for e in errors), errors


def _containers(group: dict) -> list[dict]:
    return group["template"]["spec"]["containers"]


def test_raycluster_runs_our_images_and_versions_with_gpu_workers_that_autoscale():
    project = pyproject()["project"]
    ray_version = pin("ray[", project["dependencies"])
    version = project["version"]
    cluster = _doc("raycluster.yaml")["spec"]
    assert cluster["rayVersion"] == ray_version
    assert cluster["enableInTreeAutoscaling"] is True
    [head] = _containers(cluster["headGroupSpec"])
    assert head["image"].endswith(f"/paddleray-cpu:{version}")
    assert {p["containerPort"] for p in head["ports"]} >= {6379, 10001, 9000}  # GCS, client, Serve gRPC
    groups = {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    gpu = groups["gpu"]
    assert gpu["minReplicas"] <= gpu["replicas"] <= gpu["maxReplicas"]
    [worker] = _containers(gpu)
    assert worker["image"].endswith(f"/paddleray-gpu:{version}")
    limits, requests = worker["resources"]["limits"], worker["resources"]["requests"]
    assert int(limits["nvidia.com/gpu"]) >= 1
    assert requests == limits  # guaranteed QoS: a training pod is not evicted first under pressure
    env = {e["name"]: e for e in worker["env"]}
    assert "NCCL_SOCKET_IFNAME" in env
    for group in cluster["workerGroupSpecs"]:
        mounts = {m["mountPath"] for c in _containers(group) for m in c["volumeMounts"]}
        assert {"/dev/shm", "/mnt/paddleray"} <= mounts, group["groupName"]


def test_every_ray_pod_uses_token_auth_from_one_secret():
    for doc in load_all(DEPLOY / "kuberay" / "raycluster.yaml"):
        groups = [doc["spec"]["headGroupSpec"], *doc["spec"]["workerGroupSpecs"]]
        for group in groups:
            for container in _containers(group):
                env = {e["name"]: e for e in container["env"]}
                assert env["RAY_AUTH_MODE"]["value"] == "token"
                assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "paddleray-ray-auth"


def test_every_ray_container_and_service_reads_the_object_store_secret():
    """On an s3:// storage root every node opens the store itself (ranks upload, Serve replicas
    download), and nothing hands credentials on through a runtime env (docs/storage.md)."""
    [cluster] = load_all(DEPLOY / "kuberay" / "raycluster.yaml")
    groups = [cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]]
    containers = [c for group in groups for c in _containers(group)]
    assert {"trainer", "exporter"} <= {c["name"] for c in containers}
    for container in containers:
        refs = [e["secretRef"] for e in container.get("envFrom", []) if "secretRef" in e]
        assert {"name": "paddleray-object-store", "optional": True} in refs, container["name"]


def test_rayjob_smoke_test_asks_for_a_gpu_on_gpu_workers():
    job = _doc("rayjob.yaml")["spec"]
    assert job["entrypointNumGpus"] >= 1
    assert job["shutdownAfterJobFinishes"] is True
    assert job["rayClusterSpec"]["rayVersion"] == pin("ray[", pyproject()["project"]["dependencies"])
    [gpu] = job["rayClusterSpec"]["workerGroupSpecs"]
    [worker] = _containers(gpu)
    assert "paddleray-gpu" in worker["image"]
    assert int(worker["resources"]["limits"]["nvidia.com/gpu"]) == 1
    # Exactly the GPUs the entrypoint uses: a second GPU pod would only hold a card idle.
    assert gpu["replicas"] == gpu["maxReplicas"] == job["entrypointNumGpus"]


def test_every_ray_container_exposes_the_metrics_port_prometheus_scrapes():
    cluster = _doc("raycluster.yaml")["spec"]
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        # KubeRay runs Ray in the first container; the drivers pod has the services after it.
        ray_container = _containers(group)[0]
        assert ray_container["name"] in ("ray-head", "ray-worker")
        assert {"name": "metrics", "containerPort": 8080} in ray_container["ports"], ray_container["name"]


def _groups() -> dict[str, dict]:
    return {g["groupName"]: g for g in _doc("raycluster.yaml")["spec"]["workerGroupSpecs"]}


def test_gpu_groups_give_whole_gpus_mps_or_device_plugin_shares():
    groups = _groups()
    for name in ("gpu", "gpu-mps"):
        [worker] = _containers(groups[name])
        assert worker["resources"]["limits"]["nvidia.com/gpu"] == "1", name
        assert groups[name]["rayStartParams"] == {}, "KubeRay derives num-gpus from the limit"
    # MPS in the pod: the daemon starts with the container, every CUDA process of the pod
    # finds it through the pipe directory, which the container mounts.
    [mps] = _containers(groups["gpu-mps"])
    env = {e["name"]: e["value"] for e in mps["env"] if "value" in e}
    assert "nvidia-cuda-mps-control -d" in " ".join(mps["lifecycle"]["postStart"]["exec"]["command"])
    assert "quit" in " ".join(mps["lifecycle"]["preStop"]["exec"]["command"])
    assert env["CUDA_MPS_PIPE_DIRECTORY"] in {m["mountPath"] for m in mps["volumeMounts"]}
    assert "compute" in env["NVIDIA_DRIVER_CAPABILITIES"]
    # Device-plugin sharing: a share of a card per pod, declared to Ray as one GPU, on nodes
    # whose plugin runs one of the sharing configs of deploy/k8s/gpu-sharing.yaml.
    shared = groups["gpu-shared"]
    [worker] = _containers(shared)
    assert worker["resources"]["limits"]["nvidia.com/gpu.shared"] == "1"
    assert "nvidia.com/gpu" not in worker["resources"]["limits"]
    assert shared["rayStartParams"]["num-gpus"] == "1"
    [sharing] = load_all(DEPLOY / "k8s" / "gpu-sharing.yaml")
    configs = {name: yaml.safe_load(text) for name, text in sharing["data"].items()}
    assert shared["template"]["spec"]["nodeSelector"]["nvidia.com/device-plugin.config"] in configs
    strategies = set()
    for config in configs.values():
        [(strategy, spec)] = config["sharing"].items()
        strategies.add(strategy)
        assert spec["renameByDefault"] is True, "shares are advertised as nvidia.com/gpu.shared"
        [resource] = spec["resources"]
        assert resource["name"] == "nvidia.com/gpu" and resource["replicas"] >= 2
    assert strategies == {"mps", "timeSlicing"}


def test_the_gpu_sharing_smoke_job_runs_two_half_gpu_trials_on_one_card():
    from paddleray.services.trainer import gpu_sharing_smoke

    job = _doc("rayjob-gpu-sharing.yaml")["spec"]
    assert job["entrypoint"] == f"python -m {gpu_sharing_smoke.__name__}"
    assert job["shutdownAfterJobFinishes"] is True
    [gpu] = job["rayClusterSpec"]["workerGroupSpecs"]
    assert gpu["replicas"] == gpu["maxReplicas"] == 1, "one card for both trials"
    [worker] = _containers(gpu)
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "paddleray-gpu" in worker["image"]
    assert gpu_sharing_smoke.SHARE == 0.5


def test_every_ray_container_has_the_serving_node_env():
    """Serve's proxy and replicas may run on any node (node_env.py says why each setting)."""
    from paddleray.services.exporter.serving.node_env import SERVE_NODE_ENV

    [cluster] = load_all(DEPLOY / "kuberay" / "raycluster.yaml")
    for group in [cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]]:
        for container in _containers(group):
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert {k: env.get(k) for k in SERVE_NODE_ENV} == SERVE_NODE_ENV, container["name"]


def test_every_ray_container_starts_haproxy_with_the_unavailable_error_page():
    """Serve's HAProxy through paddleray-haproxy where the image installs it (issue 21.12)."""
    from paddleray.services.exporter.serving.node_env import IMAGE_HAPROXY_BINARY, haproxy_binary_env

    expected = haproxy_binary_env(Path(IMAGE_HAPROXY_BINARY).parent)
    [cluster] = load_all(DEPLOY / "kuberay" / "raycluster.yaml")
    for group in [cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]]:
        for container in _containers(group):
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert {k: env.get(k) for k in expected} == expected, container["name"]


def test_the_drivers_pod_starts_its_containers_again_when_they_exit():
    """The exporter exits (code 75) when its Ray cluster is lost, to reconnect in a fresh
    process; the pod restarts it (Always, also Kubernetes' default), alive by its port (issue 21.3)."""
    cluster = next(d for d in load_all(DEPLOY / "kuberay" / "raycluster.yaml") if d["kind"] == "RayCluster")
    drivers = next(g for g in cluster["spec"]["workerGroupSpecs"] if g["groupName"] == "drivers")["template"]["spec"]
    assert drivers.get("restartPolicy", "Always") == "Always"
    exporter = next(c for c in drivers["containers"] if c["name"] == "exporter")
    assert exporter["livenessProbe"]["tcpSocket"]["port"] == exporter["startupProbe"]["tcpSocket"]["port"] == 50053
