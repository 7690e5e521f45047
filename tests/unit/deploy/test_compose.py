"""deploy/compose/compose.yaml checked without a container engine.

It parses; each service runs its console script with an environment its real settings class
accepts (the check deploy/k8s has); the drivers join the Ray cluster at the head's GCS port
and share the drivers node's network and /tmp/ray; no host port is published twice;
Prometheus scrapes the metrics ports the services and Ray nodes are given; Grafana gets the
datasource and the dashboard.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from paddleray.services.exporter.settings import ExporterSettings
from paddleray.services.scheduler.settings import SchedulerSettings
from paddleray.services.trainer.settings import TrainerSettings
from support.deploy import DEPLOY, REPO, pyproject, settings_from_env

pytestmark = pytest.mark.unit

COMPOSE = DEPLOY / "compose" / "compose.yaml"
SETTINGS = {"scheduler": SchedulerSettings, "trainer": TrainerSettings, "exporter": ExporterSettings}
RAY_NODES = ("ray-head", "ray-worker", "ray-worker-gpu", "ray-drivers")


def _compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _services() -> dict[str, dict]:
    return _compose()["services"]


def _env(service: dict) -> dict[str, str]:
    return {k: str(v) for k, v in service.get("environment", {}).items()}


def _flag(command: list[str], name: str) -> str:
    [value] = [word.split("=", 1)[1] for word in command if word.startswith(f"--{name}=")]
    return value


def _host(service_name: str) -> str:
    """The compose host name a service is reached at (its own, or the one whose network it shares)."""
    mode = _services()[service_name].get("network_mode", "")
    return mode.removeprefix("service:") if mode.startswith("service:") else service_name


def test_it_parses_and_has_the_whole_stack():
    assert set(_services()) == {
        "redis", "ray-head", "ray-worker", "ray-worker-gpu", "ray-drivers",
        "scheduler", "trainer", "exporter", "prometheus", "grafana",
    }
    assert "ray://" not in COMPOSE.read_text().split("\nservices:", 1)[1], "no driver uses Ray Client"


def test_redis_keeps_an_append_only_file():
    command = _services()["redis"]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert "redis-data:/data" in _services()["redis"]["volumes"]


def test_both_stores_get_the_password_the_redis_requires():
    redis = _services()["redis"]
    password = redis["command"][redis["command"].index("--requirepass") + 1]
    assert password.startswith("${PADDLERAY_REDIS_PASSWORD:?")
    assert redis["environment"]["REDISCLI_AUTH"] == password  # the healthcheck's redis-cli
    for name in ("scheduler", "exporter"):
        env = _env(_services()[name])
        assert env[f"PADDLERAY_{name.upper()}_REDIS_PASSWORD"] == password
        assert "@" not in env[f"PADDLERAY_{name.upper()}_REDIS_URL"]  # no password in the URL


def test_images_are_built_from_the_repos_dockerfiles_and_pinned():
    version = pyproject()["project"]["version"]
    for name, service in _services().items():
        image = service["image"]
        assert re.fullmatch(r"[\w./-]+:[\w.-]+", image) and not image.endswith(":latest"), (name, image)
        if image.startswith("ghcr.io/paddleray/"):
            flavour = "gpu" if "gpu" in image else "cpu"
            assert image.endswith(f"/paddleray-{flavour}:{version}")
            build = service["build"]
            assert (COMPOSE.parent / build["context"]).resolve() == REPO
            assert build["dockerfile"] == f"deploy/{flavour}/Dockerfile"


def test_the_gpu_worker_reserves_a_gpu_and_is_left_out_on_cpu_only_hosts():
    gpu = _services()["ray-worker-gpu"]
    assert gpu["profiles"] == ["gpu"], "not started unless asked for"
    [device] = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert "paddleray-gpu" in gpu["image"]
    assert "profiles" not in _services()["ray-worker"], "a CPU worker runs everywhere"


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_services_run_their_console_script_with_settings_they_accept(name, monkeypatch):
    service = _services()[name]
    assert service["command"] == [f"paddleray-{name}"]
    assert f"paddleray-{name}" in pyproject()["project"]["scripts"]
    prefix = f"PADDLERAY_{name.upper()}_"
    env = _env(service)
    # ${VAR:?message} is filled in by compose from the user's environment.
    env = {k: None if v.startswith("${") else v for k, v in env.items()}
    settings = settings_from_env(SETTINGS[name], prefix, env, monkeypatch)
    assert settings.host == "0.0.0.0"
    assert settings.port > 0 and settings.metrics_port > 0
    published = _published(_host(name))
    assert settings.port in published.values(), f"{name}'s gRPC port is published"
    assert settings.metrics_port not in published.values(), "metrics stay on the compose network"


def _published(service_name: str) -> dict[int, int]:
    """host port -> container port of what a service publishes."""
    ports = {}
    for entry in _services()[service_name].get("ports", []):
        *_, host, container = entry.split(":")
        ports[int(host)] = int(container)
    return ports


def test_no_host_port_is_published_twice_and_shared_networks_publish_on_their_owner():
    seen: dict[int, str] = {}
    for name, service in _services().items():
        if service.get("network_mode", "").startswith("service:"):
            assert "ports" not in service, f"{name} shares another's network: its ports are published there"
        for host in _published(name):
            assert host not in seen, f"host port {host}: {seen.get(host)} and {name}"
            seen[host] = name
    # Containers sharing one network need distinct ports among themselves.
    for owner in {_host(n) for n in _services()}:
        sharing = [n for n in _services() if _host(n) == owner and n in SETTINGS]
        ports = [int(_env(_services()[n])[f"PADDLERAY_{n.upper()}_{kind}"]) for n in sharing for kind in ("PORT", "METRICS_PORT")]
        assert len(ports) == len(set(ports)), (owner, ports)


def test_drivers_join_the_cluster_at_the_heads_gcs_and_share_the_drivers_node():
    services = _services()
    gcs_port = _flag(services["ray-head"]["command"], "port")
    drivers_node = services["ray-drivers"]["command"]
    assert _flag(drivers_node, "num-cpus") == "0" and _flag(drivers_node, "num-gpus") == "0"
    for node in ("ray-worker", "ray-worker-gpu", "ray-drivers"):
        assert _flag(services[node]["command"], "address") == f"ray-head:{gcs_port}", node
    for name in ("trainer", "exporter"):
        assert services[name]["network_mode"] == "service:ray-drivers"
        assert services[name]["ipc"] == "service:ray-drivers" and services["ray-drivers"]["ipc"] == "shareable"
        assert _env(services[name])[f"PADDLERAY_{name.upper()}_RAY_ADDRESS"] == f"ray-head:{gcs_port}"
        assert "ray-tmp:/tmp/ray" in services[name]["volumes"] and "ray-tmp:/tmp/ray" in services["ray-drivers"]["volumes"]
    scheduler = _env(services["scheduler"])
    trainer = _env(services["trainer"])
    assert scheduler["PADDLERAY_SCHEDULER_TRAINER_ADDRESS"] == f"ray-drivers:{trainer['PADDLERAY_TRAINER_PORT']}"
    for name in (*RAY_NODES, "trainer", "exporter"):
        env = _env(services[name])
        assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN"].startswith("${RAY_AUTH_TOKEN"), name


def test_the_exporter_reads_jobs_from_the_scheduler_with_its_token():
    """ExportModel from a job asks the scheduler for it; the exporter's default address
    (127.0.0.1:50051) is nothing inside the drivers node's network."""
    scheduler, exporter = _env(_services()["scheduler"]), _env(_services()["exporter"])
    assert exporter["PADDLERAY_EXPORTER_SCHEDULER_ADDRESS"] == f"{_host('scheduler')}:{scheduler['PADDLERAY_SCHEDULER_PORT']}"
    assert exporter["PADDLERAY_EXPORTER_SCHEDULER_AUTH_TOKEN"] == scheduler["PADDLERAY_SCHEDULER_AUTH_TOKEN"]


def test_the_scheduler_shares_the_trainers_storage_and_allowlist():
    scheduler, trainer = _env(_services()["scheduler"]), _env(_services()["trainer"])
    assert scheduler["PADDLERAY_SCHEDULER_ENTRYPOINT_ALLOWLIST"] == trainer["PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST"]
    root = scheduler["PADDLERAY_SCHEDULER_STORAGE_ROOT"]
    assert root == trainer["PADDLERAY_TRAINER_STORAGE_ROOT"] == _env(_services()["exporter"])["PADDLERAY_EXPORTER_STORAGE_ROOT"]
    for name in ("scheduler", "trainer", "exporter", "ray-head", "ray-worker", "ray-drivers"):
        assert f"storage:{root}" in _services()[name]["volumes"], name


def test_the_serving_ports_are_published_on_the_head_to_loopback_and_are_the_endpoints_shown():
    """Serve's HAProxy on the head (v2 gRPC and REST), published on the host's loopback only, and
    the endpoints deployments show are those (issue 20 point 3)."""
    exporter = _env(_services()["exporter"])
    published = {entry.rsplit(":", 1)[0]: entry for entry in _services()["ray-head"]["ports"]}
    for setting, shown in (("GRPC_PORT", "INFERENCE_ENDPOINT"), ("HTTP_PORT", "INFERENCE_HTTP_ENDPOINT")):
        port = int(exporter[f"PADDLERAY_EXPORTER_SERVING_{setting}"])
        assert _published("ray-head")[port] == port
        assert f"127.0.0.1:{port}" in published, published
        assert exporter[f"PADDLERAY_EXPORTER_{shown}"].endswith(f"127.0.0.1:{port}")


def _scrape_targets() -> dict[str, set[str]]:
    config = yaml.safe_load((COMPOSE.parent / "prometheus.yml").read_text())
    return {
        job["job_name"]: {t for static in job["static_configs"] for t in static["targets"]}
        for job in config["scrape_configs"]
    }


def test_prometheus_scrapes_the_services_and_every_ray_node_on_their_metrics_ports():
    services = _services()
    targets = _scrape_targets()
    expected = {
        f"{_host(name)}:{_env(services[name])[f'PADDLERAY_{name.upper()}_METRICS_PORT']}" for name in SETTINGS
    }
    assert targets["paddleray"] == expected
    assert targets["ray"] == {f"{node}:{_flag(services[node]['command'], 'metrics-export-port')}" for node in RAY_NODES}
    mount = next(v for v in services["prometheus"]["volumes"] if v.endswith(":/etc/prometheus/prometheus.yml:ro"))
    assert (COMPOSE.parent / mount.split(":")[0]).resolve() == (COMPOSE.parent / "prometheus.yml").resolve()


def test_grafana_is_provisioned_with_the_datasource_and_the_dashboard():
    mounts = {}
    for volume in _services()["grafana"]["volumes"]:
        source, target, _mode = volume.split(":")
        source_path = (COMPOSE.parent / source).resolve()
        assert source_path.is_file(), source
        mounts[target] = source_path
    [datasource_file] = [p for t, p in mounts.items() if t.startswith("/etc/grafana/provisioning/datasources/")]
    [datasource] = yaml.safe_load(datasource_file.read_text())["datasources"]
    prometheus_port = _published("prometheus")
    assert datasource["type"] == "prometheus"
    assert datasource["url"] == f"http://prometheus:{next(iter(prometheus_port.values()))}"
    [provider_file] = [p for t, p in mounts.items() if t.startswith("/etc/grafana/provisioning/dashboards/")]
    [provider] = yaml.safe_load(provider_file.read_text())["providers"]
    dashboards = [t for t, p in mounts.items() if p.suffix == ".json"]
    assert dashboards and all(Path(t).parent == Path(provider["options"]["path"]) for t in dashboards)


def test_every_ray_node_has_the_serving_node_env():
    from paddleray.services.exporter.serving.node_env import SERVE_NODE_ENV

    for name in RAY_NODES:
        env = _env(_services()[name])
        assert {k: env.get(k) for k in SERVE_NODE_ENV} == SERVE_NODE_ENV, name


def test_every_ray_node_starts_haproxy_with_the_unavailable_error_page():
    """Serve's HAProxy through paddleray-haproxy where the image installs it (issue 21.12)."""
    from paddleray.services.exporter.serving.node_env import IMAGE_HAPROXY_BINARY, haproxy_binary_env

    expected = haproxy_binary_env(Path(IMAGE_HAPROXY_BINARY).parent)
    for name in RAY_NODES:
        env = _env(_services()[name])
        assert {k: env.get(k) for k in expected} == expected, name


def test_every_service_is_started_again_when_it_exits():
    """The exporter exits (code 75) when its Ray cluster is lost, to reconnect in a fresh
    process: compose must start it again, as every other service (issue 21 point 3)."""
    assert {name: s.get("restart") for name, s in _services().items()
            if s.get("restart") != "unless-stopped"} == {}
