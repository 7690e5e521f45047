"""The Grafana dashboard and Prometheus configs only name metrics and labels that are exported.

Three sources, each checked where the metrics really come from:
- the services' own metrics (prometheus_client, each service's /metrics): their registry;
- Ray's metrics and the serving metrics (recorded through Ray's metrics API in the Serve
  replicas): a live Ray node's metrics endpoint, read after the serving metrics were
  recorded once through the serving code's own functions; Prometheus renames
  ray_paddleray_* to paddleray_* (metric_relabel_configs), and so does this test;
- Ray's GPU gauges, which a node reports only when it has a GPU: none here, so they are
  listed below with that reason and checked against Ray's own reporter instead.
"""

from __future__ import annotations

import json
import re
import urllib.request
from functools import cache
from pathlib import Path

import pytest
import yaml
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

import paddleray.services.common.metrics  # noqa: F401 - registers the metrics under test
import paddleray.services.scheduler.metrics  # noqa: F401
import paddleray.services.trainer.metrics  # noqa: F401
from paddleray.services.localstack.ports import wait_until

OBSERVABILITY = Path(__file__).resolve().parents[3] / "deploy" / "observability"
COMPOSE = OBSERVABILITY.parent / "compose"
SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")
METRIC = re.compile(r"\b(?:ray_|paddleray_)[a-z_]+")

# Reported by a Ray node only when it has GPUs (Ray's reporter agent reads them from the
# GPUs it finds), so they cannot appear on the GPU-less test cluster.
RAY_GPU_ONLY = {
    "ray_node_gpus_utilization": "GPU utilisation of each GPU of a node, percent",
    "ray_node_gram_used": "GPU memory used on each GPU of a node, MiB",
    "ray_node_gram_available": "GPU memory free on each GPU of a node, MiB",
}

# The serving code records these through Ray's metrics API; the names and labels agreed with
# it, checked live below.
SERVING_METRICS = {
    "paddleray_inference_requests_total": {"model", "version", "code"},
    "paddleray_inference_latency_seconds_bucket": {"model", "version", "le"},
    "paddleray_inference_batch_size_bucket": {"model", "version", "le"},
    "paddleray_inference_batch_size_sum": {"model", "version"},
    "paddleray_inference_batch_size_count": {"model", "version"},
    "paddleray_serving_replicas": {"model", "version"},
}


def _services_exported() -> dict[str, set[str]]:
    """Metric sample names the services register with prometheus_client, with their labels."""
    names: dict[str, set[str]] = {}
    for collector in REGISTRY._collector_to_names:  # noqa: SLF001 - the registry has no public listing
        for metric in collector.describe() if hasattr(collector, "describe") else []:
            if metric.name.startswith("paddleray_"):
                labels = set(getattr(collector, "_labelnames", ())) | {"le"}
                for suffix in ("", *SUFFIXES):
                    names[metric.name + suffix] = labels
    return names


def _exprs() -> list[str]:
    dashboard = json.loads((OBSERVABILITY / "grafana" / "paddleray-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert exprs
    return exprs


def _by_labels(expr: str) -> set[str]:
    return {one.strip() for group in re.findall(r"by \(([^)]*)\)", expr) for one in group.split(",")}


def _used() -> dict[str, set[str]]:
    """Every metric the dashboard names, with the labels its queries group it by."""
    used: dict[str, set[str]] = {}
    for expr in _exprs():
        names = set(METRIC.findall(expr))
        assert names, expr
        for name in names:
            used.setdefault(name, set()).update(_by_labels(expr))
    return used


@cache
def _rename_rules() -> list[dict]:
    rules = []
    for path in (OBSERVABILITY / "prometheus.yml", COMPOSE / "prometheus.yml"):
        config = yaml.safe_load(path.read_text())
        [ray_job] = [j for j in config["scrape_configs"] if j["job_name"] == "ray"]
        [rule] = ray_job["metric_relabel_configs"]
        assert rule["source_labels"] == ["__name__"] and rule["target_label"] == "__name__", path
        rules.append(rule)
    return rules


@cache
def _rename(name: str) -> str:
    """What the ray scrape jobs' metric_relabel_configs (Kubernetes and compose alike) do to
    a sample name."""
    renamed = set()
    for rule in _rename_rules():
        # Prometheus anchors the regex and writes the replacement only when it matches.
        match = re.fullmatch(rule["regex"], name)
        renamed.add(match.expand(rule["replacement"].replace("$1", r"\1")) if match else name)
    [one] = renamed
    return one


def test_the_dashboard_shows_serving_and_gpus():
    used = _used()
    assert set(SERVING_METRICS) & used.keys() >= {
        "paddleray_inference_requests_total", "paddleray_inference_latency_seconds_bucket",
        "paddleray_inference_batch_size_bucket", "paddleray_serving_replicas",
    }
    assert set(RAY_GPU_ONLY) <= used.keys()
    for name in SERVING_METRICS:
        if name in used:
            assert {"model", "version"} <= used[name], f"{name} per model and version"
    assert "ip" in used["ray_node_gpus_utilization"] and "ip" in used["ray_node_gram_used"], "per node"


def test_service_metrics_in_the_dashboard_are_exported_with_their_labels():
    exported = _services_exported()
    for name, labels in _used().items():
        if name.startswith("ray_") or name in SERVING_METRICS:
            continue
        assert name in exported, f"{name} is not exported by any service"
        assert labels <= exported[name], f"{name}: labels {labels - exported[name]} are not exported"


def test_ray_gpu_metrics_are_gpu_gauges_of_rays_own_reporter():
    """The GPU-only metrics exist in Ray's reporter, per GPU, with the labels the panels use."""
    from ray.dashboard.modules.reporter.reporter_agent import METRICS_GAUGES

    used = _used()
    for name in RAY_GPU_ONLY:
        labels = set(METRICS_GAUGES[name.removeprefix("ray_")].view.columns)
        assert "GpuIndex" in labels, f"{name} is a per-GPU gauge"
        assert used[name] <= labels, (name, used[name] - labels)


def test_serving_metrics_in_the_dashboard_are_the_agreed_names_and_labels():
    """The serving panels use the agreed names and labels (checked live below)."""
    for name, labels in _used().items():
        if name.startswith(("paddleray_inference_", "paddleray_serving_")):
            assert name in SERVING_METRICS, f"{name} is not a serving metric"
            assert labels <= SERVING_METRICS[name], (name, labels)


def _record_serving_metrics_once() -> None:
    """Records one sample of each serving metric through the serving code's own functions."""
    from paddleray.services.exporter.serving.replica import metrics as serving

    recorded = serving.ServingMetrics()
    recorded.request("observability-check", "1", "OK", 0.002)
    recorded.batch("observability-check", "1", 4)
    recorded.serving("observability-check", ["1"])
    recorded.flush()


@pytest.mark.integration
def test_ray_and_serving_metrics_in_the_dashboard_are_on_a_live_ray_node(ray_cluster):
    import ray

    _record_serving_metrics_once()
    [port] = {node["MetricsExportPort"] for node in ray.nodes() if node["Alive"]}
    wanted = {name for name in _used() if name.startswith("ray_") and name not in RAY_GPU_ONLY}
    wanted |= {name for name in _used() if name in SERVING_METRICS}

    samples: dict[str, set[str]] = {}  # every sample name seen so far, with its labels

    def scrape() -> bool:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.setdefault(_rename(sample.name), set()).update(sample.labels)
        return wanted <= samples.keys()

    # Ray's agent reports node metrics, and drivers push theirs, every few seconds.
    try:
        wait_until(scrape, timeout=120, interval=2, message="the metrics on Ray's endpoint")
    except TimeoutError:
        pytest.fail(f"not on Ray's metrics endpoint: {sorted(wanted - samples.keys())}")
    for name in wanted:
        assert _used()[name] <= samples[name], f"{name}: labels {_used()[name] - samples[name]} are not exported"


def test_prometheus_config_keeps_only_the_services_metrics_ports():
    config = yaml.safe_load((OBSERVABILITY / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    keep = [r for r in jobs["paddleray"]["relabel_configs"] if r.get("action") == "keep"]
    port_rule = next(r for r in keep if r["source_labels"] == ["__meta_kubernetes_pod_container_port_name"])
    container_rule = next(r for r in keep if r["source_labels"] == ["__meta_kubernetes_pod_container_name"])
    component_rule = next(r for r in keep if "component" in "".join(r["source_labels"]))
    pods = _service_pods()
    for service, (component, port_name) in pods.items():
        assert re.fullmatch(component_rule["regex"], f"paddleray;{component}"), service
        assert re.fullmatch(container_rule["regex"], service), service
        assert re.fullmatch(port_rule["regex"], port_name), (service, port_name)
    assert not re.fullmatch(port_rule["regex"], "grpc") and not re.fullmatch(container_rule["regex"], "ray-worker")
    assert _rename("ray_paddleray_inference_requests_total") == "paddleray_inference_requests_total"
    assert _rename("ray_node_gpus_utilization") == "ray_node_gpus_utilization", "Ray's own names stay"


def _service_pods() -> dict[str, tuple[str, str]]:
    """service -> (its pod's component label, its metrics port name) from the manifests."""
    from support.deploy import DEPLOY, load_all

    found = {}
    [scheduler] = [d for d in load_all(DEPLOY / "k8s" / "scheduler.yaml") if d["kind"] == "Deployment"]
    [cluster] = load_all(DEPLOY / "kuberay" / "raycluster.yaml")
    [drivers] = [g for g in cluster["spec"]["workerGroupSpecs"] if g["groupName"] == "drivers"]
    for template in (scheduler["spec"]["template"], drivers["template"]):
        for container in template["spec"]["containers"]:
            if container["name"] in ("scheduler", "trainer", "exporter"):
                env = {e["name"]: e.get("value") for e in container["env"]}
                metrics_port = int(env[f"PADDLERAY_{container['name'].upper()}_METRICS_PORT"])
                [name] = [p["name"] for p in container["ports"] if p["containerPort"] == metrics_port]
                found[container["name"]] = (template["metadata"]["labels"]["app.kubernetes.io/component"], name)
    assert set(found) == {"scheduler", "trainer", "exporter"}
    return found
