"""deploy/k8s and the drivers in deploy/kuberay hang together and configure real settings.

Kubernetes cannot run here; what can drift is checked: selectors and labels, probes on the
gRPC port (every paddleray server answers grpc.health.v1), commands that are console
scripts of the package, environment variables that are fields of the service's settings
with values those settings accept, and that no driver goes through Ray Client.
"""

from __future__ import annotations

import pytest

from paddleray.services.exporter.settings import ExporterSettings
from paddleray.services.scheduler.settings import SchedulerSettings
from paddleray.services.trainer.settings import TrainerSettings
from support.deploy import DEPLOY, load_all, pyproject, settings_from_env, walk_strings

pytestmark = pytest.mark.unit

SETTINGS = {"scheduler": SchedulerSettings, "trainer": TrainerSettings, "exporter": ExporterSettings}
DRIVERS = ("trainer", "exporter")


def _objects() -> list[dict]:
    return [doc for path in sorted((DEPLOY / "k8s").glob("*.yaml")) for doc in load_all(path)]


def _by_kind(kind: str) -> dict[str, dict]:
    return {doc["metadata"]["name"]: doc for doc in _objects() if doc["kind"] == kind}


def _raycluster() -> dict:
    [cluster] = load_all(DEPLOY / "kuberay" / "raycluster.yaml")
    return cluster


def _drivers_group() -> dict:
    [group] = [g for g in _raycluster()["spec"]["workerGroupSpecs"] if g["groupName"] == "drivers"]
    return group


def _pod_template(service: str) -> dict:
    """The pod template a service's container is in: its Deployment's, or the drivers group's."""
    if service in DRIVERS:
        return _drivers_group()["template"]
    return _by_kind("Deployment")[f"paddleray-{service}"]["spec"]["template"]


def _container(service: str) -> dict:
    [container] = [c for c in _pod_template(service)["spec"]["containers"] if c["name"] == service]
    return container


def test_every_object_is_well_formed():
    for doc in _objects():
        assert {"apiVersion", "kind", "metadata"} <= doc.keys(), doc
        assert doc["metadata"]["labels"]["app.kubernetes.io/name"] == "paddleray"


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet"])
def test_workloads_select_their_own_pods_and_have_a_service(kind):
    services = _by_kind("Service")
    for name, workload in _by_kind(kind).items():
        selector = workload["spec"]["selector"]["matchLabels"]
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), name
        service = services[name]
        assert service["spec"]["selector"] == selector
        ports = {p["name"] for c in workload["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, (name, port)


@pytest.mark.parametrize("service", DRIVERS)
def test_the_drivers_services_select_the_drivers_pod_and_its_ports(service):
    spec = _by_kind("Service")[f"paddleray-{service}"]["spec"]
    template = _pod_template(service)
    assert spec["selector"].items() <= template["metadata"]["labels"].items()
    ports = {p["name"]: p["containerPort"] for p in _container(service)["ports"]}
    for port in spec["ports"]:
        assert port["targetPort"] in ports, port
        assert port["port"] == ports[port["targetPort"]], "the Service keeps the container's port numbers"


def test_the_inference_service_exposes_both_serving_endpoints_on_the_head():
    """Serve's HAProxy on the head: v2 gRPC and v2 REST, on the ports the exporter starts it on,
    and the endpoints deployments show (and the exporter probes) are that Service's."""
    spec = _by_kind("Service")["paddleray-inference"]["spec"]
    head = _raycluster()["spec"]["headGroupSpec"]["template"]
    assert spec["selector"].items() <= head["metadata"]["labels"].items()
    ports = {p["appProtocol"]: p for p in spec["ports"]}
    assert set(ports) == {"grpc", "http"}
    head_ports = {p["name"]: p["containerPort"] for c in head["spec"]["containers"] for p in c["ports"]}
    env = {e["name"]: e.get("value") for e in _container("exporter")["env"]}
    for protocol, setting in (("grpc", "GRPC_PORT"), ("http", "HTTP_PORT")):
        port = ports[protocol]
        assert head_ports[port["targetPort"]] == port["port"] == int(env[f"PADDLERAY_EXPORTER_SERVING_{setting}"])
    name = _by_kind("Service")["paddleray-inference"]["metadata"]["name"]
    assert env["PADDLERAY_EXPORTER_INFERENCE_ENDPOINT"] == f"{name}:{ports['grpc']['port']}"
    assert env["PADDLERAY_EXPORTER_INFERENCE_HTTP_ENDPOINT"] == f"http://{name}:{ports['http']['port']}"
    assert env["PADDLERAY_EXPORTER_SERVING_PROBE_HOST"] == name
    # HAProxy binds its pod's interfaces: the Service reaches it there.
    assert env["PADDLERAY_EXPORTER_SERVING_HTTP_HOST"] == "0.0.0.0"


@pytest.mark.parametrize("service", sorted(SETTINGS))
def test_services_run_their_console_script_with_probes_on_their_grpc_port(service):
    container = _container(service)
    assert container["command"] == [f"paddleray-{service}"]
    assert f"paddleray-{service}" in pyproject()["project"]["scripts"]
    [grpc_port] = [p["containerPort"] for p in container["ports"] if p["name"].endswith("grpc")]
    # Ready = gRPC health SERVING; every probe is on the service's own port.
    assert container["readinessProbe"]["grpc"]["port"] == grpc_port
    for probe in ("startupProbe", "livenessProbe"):
        [(kind, target)] = [(k, v) for k, v in container[probe].items() if k in ("grpc", "tcpSocket")]
        assert target["port"] == grpc_port, probe
        if service in DRIVERS:
            # NOT_SERVING while Ray is away must not get a reconnecting driver restarted.
            assert kind == "tcpSocket", probe
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert int(env[f"PADDLERAY_{service.upper()}_PORT"]) == grpc_port
    assert env[f"PADDLERAY_{service.upper()}_HOST"] == "0.0.0.0"


@pytest.mark.parametrize("service", sorted(SETTINGS))
def test_env_vars_are_settings_fields_with_acceptable_values(service, monkeypatch):
    prefix = f"PADDLERAY_{service.upper()}_"
    env = {var["name"]: var.get("value") for var in _container(service)["env"]}
    settings = settings_from_env(SETTINGS[service], prefix, env, monkeypatch)
    assert settings.port == int(env[f"{prefix}PORT"])


def test_no_manifest_connects_through_ray_client():
    """Ray Client (ray://) is a documented fallback only: no value in any manifest uses it."""
    paths = [*sorted((DEPLOY / "k8s").glob("*.yaml")), *sorted((DEPLOY / "kuberay").glob("*.yaml")),
             *sorted((DEPLOY / "compose").glob("*.yaml"))]
    assert len(paths) > 5
    for path in paths:
        for doc in load_all(path):
            for value in walk_strings(doc):
                assert "ray://" not in value, f"{path.name}: {value}"


@pytest.mark.parametrize("service", DRIVERS)
def test_drivers_run_on_a_ray_node_and_reach_the_gcs_directly(service):
    cluster = _raycluster()["spec"]
    group = _drivers_group()
    assert group["rayStartParams"]["num-cpus"] == "0" and group["rayStartParams"]["num-gpus"] == "0"
    assert group["minReplicas"] == group["replicas"] == group["maxReplicas"] == 1
    env = {e["name"]: e.get("value") for e in _container(service)["env"]}
    host, port = env[f"PADDLERAY_{service.upper()}_RAY_ADDRESS"].split(":")
    assert host == f"{_raycluster()['metadata']['name']}-head-svc"  # the Service KubeRay creates
    gcs = {p["name"]: p["containerPort"] for c in cluster["headGroupSpec"]["template"]["spec"]["containers"] for p in c["ports"]}
    assert int(port) == gcs["gcs"]
    # The driver reaches its node's raylet through sockets under /tmp/ray, and its object
    # store through /dev/shm: the same volumes as the Ray container's.
    [ray_container, *_] = group["template"]["spec"]["containers"]
    assert ray_container["name"] == "ray-worker"
    mounts = {m["mountPath"]: m["name"] for m in ray_container["volumeMounts"]}
    driver_mounts = {m["mountPath"]: m["name"] for m in _container(service)["volumeMounts"]}
    for path in ("/tmp/ray", "/dev/shm"):
        assert driver_mounts[path] == mounts[path], path


def test_port_names_are_unique_per_pod_and_valid():
    templates = [w["spec"]["template"] for kind in ("Deployment", "StatefulSet") for w in _by_kind(kind).values()]
    cluster = _raycluster()["spec"]
    templates += [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]
    for template in templates:
        names = [p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])]
        assert len(names) == len(set(names)), names
        assert all(len(n) <= 15 for n in names), names  # an IANA_SVC_NAME


def test_the_scheduler_reaches_the_trainer_service_and_storage_is_shared():
    env = {e["name"]: e.get("value") for e in _container("scheduler")["env"]}
    host, port = env["PADDLERAY_SCHEDULER_TRAINER_ADDRESS"].split(":")
    trainer_service = _by_kind("Service")[host]
    assert int(port) in {p["port"] for p in trainer_service["spec"]["ports"]}
    claims = set(_by_kind("PersistentVolumeClaim"))
    # The scheduler stores uploaded code packages there; the drivers read them and write runs.
    scheduler_volumes = _by_kind("Deployment")["paddleray-scheduler"]["spec"]["template"]["spec"]["volumes"]
    volumes = [*scheduler_volumes, *_drivers_group()["template"]["spec"]["volumes"]]
    assert {v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v} <= claims
    for service in ("scheduler", *DRIVERS):
        env = {e["name"]: e.get("value") for e in _container(service)["env"]}
        mounts = {m["mountPath"] for m in _container(service)["volumeMounts"]}
        assert env[f"PADDLERAY_{service.upper()}_STORAGE_ROOT"] in mounts
    [claim] = claims
    assert _by_kind("PersistentVolumeClaim")[claim]["spec"]["accessModes"] == ["ReadWriteMany"]


def test_the_scheduler_checks_the_trainers_allowlist():
    allowlists = {
        service: {e["name"]: e.get("value") for e in _container(service)["env"]}[
            f"PADDLERAY_{service.upper()}_ENTRYPOINT_ALLOWLIST"
        ]
        for service in ("scheduler", "trainer")
    }
    assert allowlists["scheduler"] == allowlists["trainer"]


def _secret_of(env_var: dict) -> tuple[str, str]:
    ref = env_var["valueFrom"]["secretKeyRef"]
    return ref["name"], ref["key"]


def test_the_exporter_reads_jobs_from_the_scheduler_service_with_the_schedulers_token():
    """ExportModel from a job asks the scheduler for it: the exporter's default
    (127.0.0.1:50051) answers nothing in the drivers pod."""
    exporter = {e["name"]: e for e in _container("exporter")["env"]}
    host, port = exporter["PADDLERAY_EXPORTER_SCHEDULER_ADDRESS"]["value"].split(":")
    scheduler_service = _by_kind("Service")[host]
    [grpc_port] = [p["port"] for p in scheduler_service["spec"]["ports"] if p["name"] == "grpc"]
    assert int(port) == grpc_port
    scheduler = {e["name"]: e for e in _container("scheduler")["env"]}
    assert _secret_of(exporter["PADDLERAY_EXPORTER_SCHEDULER_AUTH_TOKEN"]) == _secret_of(
        scheduler["PADDLERAY_SCHEDULER_AUTH_TOKEN"]
    )


def test_both_stores_get_the_password_the_redis_requires_from_one_secret():
    [redis] = _by_kind("StatefulSet")["paddleray-redis"]["spec"]["template"]["spec"]["containers"]
    args, env = redis["args"], {e["name"]: e for e in redis["env"]}
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"  # expanded by Kubernetes from env
    secret = _secret_of(env["REDIS_PASSWORD"])
    assert _secret_of(env["REDISCLI_AUTH"]) == secret  # the readiness probe's redis-cli
    for service in ("scheduler", "exporter"):
        service_env = {e["name"]: e for e in _container(service)["env"]}
        assert service_env[f"PADDLERAY_{service.upper()}_REDIS_URL"]["value"].startswith("redis://paddleray-redis:")
        assert _secret_of(service_env[f"PADDLERAY_{service.upper()}_REDIS_PASSWORD"]) == secret
