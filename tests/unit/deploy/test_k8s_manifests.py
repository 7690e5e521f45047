"""deploy/k8s: the services' Deployments and Services hang together and configure real settings.

Kubernetes cannot run here; what can drift is checked: selectors and labels, probes on the
gRPC port (every paddleray server answers grpc.health.v1), commands that are console
scripts of the package, and environment variables that are fields of the service's settings
with values those settings accept.
"""

from __future__ import annotations

import pytest

from paddleray.services.exporter.settings import ExporterSettings
from paddleray.services.scheduler.settings import SchedulerSettings
from paddleray.services.trainer.settings import TrainerSettings
from support.deploy import DEPLOY, load_all, pyproject

pytestmark = pytest.mark.unit

SETTINGS = {"scheduler": SchedulerSettings, "trainer": TrainerSettings, "exporter": ExporterSettings}


def _objects() -> list[dict]:
    return [doc for path in sorted((DEPLOY / "k8s").glob("*.yaml")) for doc in load_all(path)]


def _by_kind(kind: str) -> dict[str, dict]:
    return {doc["metadata"]["name"]: doc for doc in _objects() if doc["kind"] == kind}


def _container(service: str) -> dict:
    [container] = _by_kind("Deployment")[f"paddleray-{service}"]["spec"]["template"]["spec"]["containers"]
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


@pytest.mark.parametrize("service", sorted(SETTINGS))
def test_services_run_their_console_script_with_grpc_probes_on_their_port(service):
    container = _container(service)
    assert container["command"] == [f"paddleray-{service}"]
    assert f"paddleray-{service}" in pyproject()["project"]["scripts"]
    [grpc_port] = [p["containerPort"] for p in container["ports"] if p["name"] == "grpc"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == grpc_port, probe
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert int(env[f"PADDLERAY_{service.upper()}_PORT"]) == grpc_port
    assert env[f"PADDLERAY_{service.upper()}_HOST"] == "0.0.0.0"


@pytest.mark.parametrize("service", sorted(SETTINGS))
def test_env_vars_are_settings_fields_with_acceptable_values(service, monkeypatch):
    settings_class = SETTINGS[service]
    prefix = f"PADDLERAY_{service.upper()}_"
    env = _container(service)["env"]
    for var in env:
        if var["name"].startswith("PADDLERAY_"):
            assert var["name"].startswith(prefix), var["name"]
            assert var["name"][len(prefix):].lower() in settings_class.model_fields, var["name"]
            # Secrets and pod fields are filled in by Kubernetes; a stand-in shows the type fits.
            monkeypatch.setenv(var["name"], var.get("value", "from-kubernetes"))
    settings = settings_class()
    assert settings.port == int(next(v["value"] for v in env if v["name"] == f"{prefix}PORT"))


def test_the_scheduler_reaches_the_trainer_service_and_storage_is_shared():
    env = {e["name"]: e.get("value") for e in _container("scheduler")["env"]}
    host, port = env["PADDLERAY_SCHEDULER_TRAINER_ADDRESS"].split(":")
    trainer_service = _by_kind("Service")[host]
    assert int(port) in {p["port"] for p in trainer_service["spec"]["ports"]}
    claims = set(_by_kind("PersistentVolumeClaim"))
    for service in ("scheduler", "trainer", "exporter"):  # the scheduler stores code packages there
        deployment = _by_kind("Deployment")[f"paddleray-{service}"]
        volumes = deployment["spec"]["template"]["spec"]["volumes"]
        assert {v["persistentVolumeClaim"]["claimName"] for v in volumes} <= claims
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
