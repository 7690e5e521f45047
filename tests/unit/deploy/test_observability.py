"""The Grafana dashboard and Prometheus config only name metrics and labels the services export."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client import REGISTRY

import paddleray.services.common.metrics  # noqa: F401 - registers the metrics under test
import paddleray.services.scheduler.metrics  # noqa: F401
import paddleray.services.trainer.metrics  # noqa: F401

pytestmark = pytest.mark.unit

OBSERVABILITY = Path(__file__).resolve().parents[3] / "deploy" / "observability"
SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


def _exported() -> dict[str, set[str]]:
    """Metric sample names the services register, with the labels of each."""
    names: dict[str, set[str]] = {}
    for collector in REGISTRY._collector_to_names:  # noqa: SLF001 - the registry has no public listing
        for metric in collector.describe() if hasattr(collector, "describe") else []:
            if metric.name.startswith("paddleray_"):
                labels = set(getattr(collector, "_labelnames", ())) | {"le"}
                for suffix in ("", *SUFFIXES):
                    names[metric.name + suffix] = labels
    return names


def test_every_dashboard_query_uses_exported_metrics_and_labels():
    exported = _exported()
    dashboard = json.loads((OBSERVABILITY / "grafana" / "paddleray-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert exprs
    for expr in exprs:
        used = set(re.findall(r"\bpaddleray_[a-z_]+", expr))
        assert used, expr
        for name in used:
            assert name in exported, f"{name} in {expr!r} is not exported by any service"
            for label in re.findall(r"by \(([^)]*)\)", expr):
                for one in (x.strip() for x in label.split(",")):
                    assert one in exported[name], f"label {one!r} of {name} in {expr!r} is not exported"


def test_prometheus_config_keeps_only_the_services_metrics_ports():
    config = yaml.safe_load((OBSERVABILITY / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    keep = [r for r in jobs["paddleray"]["relabel_configs"] if r.get("action") == "keep"]
    assert any(r["regex"] == "metrics" for r in keep)
    component_rule = next(r for r in keep if "component" in "".join(r["source_labels"]))
    for service in ("scheduler", "trainer", "exporter"):
        assert re.fullmatch(component_rule["regex"], f"paddleray;{service}")
    for manifest in ("scheduler", "trainer", "exporter"):
        text = (OBSERVABILITY.parent / "k8s" / f"{manifest}.yaml").read_text()
        assert "name: metrics" in text and f"app.kubernetes.io/component: {manifest}" in text
