"""deploy/observability: the alert rules pass ``promtool check rules`` and their unit tests, and the rules, the
Grafana dashboard and docs/observability.md name only metric families the services really expose (and the doc
names all of them).

promtool comes with Debian's ``prometheus`` package (``apt-get install -y prometheus``); the checks that run it are
skipped, saying so, when it is absent.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from allot_runtime.kube.reflector import WatchMetrics
from allot_runtime.metrics import Metrics
from binder.adapters.kube import BinderMetrics
from binder.observe import latency_metrics
from device_allocator.observe import placement_metrics
from gang_coordinator.observe import gang_metrics
from quota_manager.observe import quota_metrics

REPO = Path(__file__).resolve().parents[2]
OBSERVABILITY = REPO / "deploy" / "observability"
RULES = OBSERVABILITY / "allot-rules.yaml"
RULE_TESTS = OBSERVABILITY / "allot-rules.test.yaml"
DASHBOARD = OBSERVABILITY / "grafana-dashboard.json"
DOC = REPO / "docs" / "observability.md"
RELAY = REPO / "services" / "relay" / "src" / "allot_relay" / "main.py"

NAME = re.compile(r"\b((?:allot|process|python)_[a-z0-9_]+)\b(?!\.)")  # not a module (allot_placement.x)
RECORDED = re.compile(r"\ballot:[a-z0-9_:]+")
SUFFIXES = ("_total", "_created", "_bucket", "_sum", "_count")

needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool not installed (Debian: apt-get install -y prometheus); rule files not checked",
)


def service_families() -> dict[str, str]:
    """Every family the services register (family name -> type): the common ones, the scheduler's, the domain
    collectors of the device-allocator, quota-manager, gang-coordinator and binder, and Kubernetes mode's."""
    setups = {
        "device-allocator": [placement_metrics],
        "quota-manager": [quota_metrics],
        "gang-coordinator": [gang_metrics],
        "binder": [latency_metrics],
    }
    families: dict[str, str] = {}
    for service, factories in setups.items():
        metrics = Metrics(service, scheduler=service == "device-allocator")
        for factory in factories:
            metrics.add(factory, lambda: None)
        if service == "binder":  # Kubernetes mode: the watchers and the binder's worker
            WatchMetrics.of(metrics.registry)
            BinderMetrics.of(metrics.registry)
        for collector in list(metrics.registry._collector_to_names):  # every registered collector
            describe = getattr(collector, "describe", None)
            for family in describe() if describe is not None else collector.collect():
                families[family.name] = family.type
    return families


def relay_families() -> set[str]:
    """The relay process's families (its registry is built inside the process)."""
    text = RELAY.read_text()
    gauges = set(re.findall(r'Gauge\(\s*"(allot_relay_[a-z_]+)"', text))
    counters = {
        f"{name}_total" for name in re.findall(r'CounterMetricFamily\(\s*"(allot_relay_[a-z_]+)"', text)
    }
    return gauges | counters


def exposed_samples() -> set[str]:
    """Every sample name a scrape can contain."""
    out = set(relay_families())
    for name, kind in service_families().items():
        out.add(name)
        if kind == "counter":
            out |= {f"{name}_total", f"{name}_created"}
        if kind == "histogram":
            out |= {f"{name}_bucket", f"{name}_sum", f"{name}_count", f"{name}_created"}
    return out


def rules() -> dict[str, Any]:
    return dict(yaml.safe_load(RULES.read_text()))


def dashboard_exprs() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])]


def test_the_catalogue_has_the_families_the_issue_asks_for():
    families = service_families()
    assert {
        "allot_node_gpus_allocatable",
        "allot_node_gpus_allocated",
        "allot_node_gpu_cores_allocatable_gpus",
        "allot_node_gpu_cores_allocated_gpus",
        "allot_gpu_core_allocated_ratio",
        "allot_gpu_memory_allocated_bytes",
        "allot_gpu_memory_capacity_bytes",
        "allot_gpu_healthy",
        "allot_build_info",
        "allot_gpu_fragmentation_ratio",
        "allot_cluster_gpu_fragmentation_ratio",
        "allot_quota_min",
        "allot_quota_max",
        "allot_quota_runtime",
        "allot_quota_used",
        "allot_quota_borrowed",
        "allot_pending_pods",
        "allot_pod_submit_to_bound_duration_seconds",
        "allot_consumer_lag_events",
        "allot_consumer_lag_seconds",
        "allot_log_appended_events",
        "allot_events_emitted",
        "process_resident_memory_bytes",
        "python_gc_collections",
    } <= set(families)
    assert families["allot_pod_submit_to_bound_duration_seconds"] == "histogram"
    assert families["allot_log_appended_events"] == "counter"
    assert "allot_relay_published_position" in relay_families()


@needs_promtool
def test_promtool_checks_the_rules():
    result = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@needs_promtool
def test_promtool_unit_tests_of_the_alerts_pass():
    result = subprocess.run(
        ["promtool", "test", "rules", RULE_TESTS.name], capture_output=True, text=True, cwd=OBSERVABILITY
    )
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_every_dashboard_query_is_valid_promql(tmp_path: Path):
    variables = {
        "$__rate_interval": "5m",
        "$model": ".*",
        "$node": ".*",
        "$pool": ".*",
        "$quota": ".*",
        "$resource": "cpu",
    }
    records = []
    for index, expr in enumerate(dashboard_exprs()):
        for variable, value in variables.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, f"unknown dashboard variable in {expr}"
        records.append({"record": f"dashboard:query_{index}", "expr": expr})
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]}))
    result = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_rules_and_dashboard_name_only_exposed_metrics():
    exposed = exposed_samples()
    texts = {"rules": RULES.read_text(), "dashboard": "\n".join(dashboard_exprs())}
    for where, text in texts.items():
        unknown = sorted(set(NAME.findall(text)) - exposed)
        assert not unknown, f"{where} names metrics no service exposes: {unknown}"
    recorded = {r["record"] for g in rules()["groups"] for r in g["rules"] if "record" in r}
    used = set(RECORDED.findall(texts["rules"])) | set(RECORDED.findall(texts["dashboard"]))
    assert used <= recorded, f"recording rules used but not defined: {sorted(used - recorded)}"


def test_every_alert_has_a_severity_and_a_summary_and_is_unit_tested():
    tested = {
        case["alertname"]
        for t in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in t.get("alert_rule_test", [])
    }
    for group in rules()["groups"]:
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
            assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
            assert rule["alert"] in tested, f"{rule['alert']} has no promtool unit test"


def test_the_dashboard_is_importable_grafana_json():
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] and board["title"] and board["schemaVersion"] >= 36
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    variables = {v["name"] for v in board["templating"]["list"]}
    assert {"datasource", "model", "node", "pool", "resource", "quota"} <= variables
    per_gpu = next(p for p in board["panels"] if p["type"] == "row" and p["title"] == "Per GPU")
    assert any(
        "allot_gpu_core_allocated_ratio" in t["expr"] for p in board["panels"] for t in p.get("targets", [])
    )
    assert (
        per_gpu["gridPos"]["y"] < next(p for p in board["panels"] if p["title"] == "Quotas")["gridPos"]["y"]
    )
    for panel in board["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]


def test_the_doc_lists_every_family_and_no_other():
    doc = DOC.read_text()
    documented = {name for name in NAME.findall(doc) if name.startswith("allot_")}
    families = {
        f"{name}_total" if kind == "counter" else name
        for name, kind in service_families().items()
        if name.startswith("allot_")
    } | relay_families()
    missing = sorted(families - documented)
    assert not missing, f"docs/observability.md does not describe {missing}"
    stale = sorted(documented - exposed_samples())
    assert not stale, f"docs/observability.md names metrics no service exposes: {stale}"
    assert "process_" in doc and "python_gc_" in doc
